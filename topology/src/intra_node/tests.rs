//! Tests of the NCCL XML reader and the GPU allocator on the shipped SKU files.

use proptest::prelude::*;

use super::xml::busid_key;
use super::*;

fn layout(name: &str) -> HostLayout {
    builtin(name).unwrap_or_else(|| panic!("builtin {name} must parse"))
}

/// (NUMA id, per switch: (GPU count, NIC count)) for every NUMA node.
fn shape(l: &HostLayout) -> Vec<(i32, Vec<(usize, usize)>)> {
    l.numa().iter().map(|n| (n.id, n.switches.iter().map(|s| (s.gpus.len(), s.nics.len())).collect())).collect()
}

#[test]
fn ndv4_is_four_numa_nodes_of_one_switch_with_two_gpus_and_two_nics() {
    let l = layout("azure-ndv4");
    assert_eq!(l.gpu_count(), 8);
    assert_eq!(shape(&l), (0..4).map(|id| (id, vec![(2, 2)])).collect::<Vec<_>>());
    assert_eq!(l.nics().len(), 8);
    // Bus id order, not file order: the file lists 0003/0004 first, under NUMA 0.
    let g0 = l.gpu(0).unwrap();
    assert_eq!((g0.busid.as_str(), g0.numa_id, g0.switch.as_str()), ("0001:00:00.0", 1, "ffff:ff:02.0"));
    assert_eq!(l.switch_of(2).unwrap().busid, "ffff:ff:01.0");
    assert_eq!(l.numa_of(7).unwrap().id, 2);
    assert_eq!(l.nics_near(0), ["0101:00:00.0", "0102:00:00.0"]);
    assert_eq!(l.numa()[0].switches[0].gpus, [2, 3]);
}

#[test]
fn ndv5_is_two_numa_nodes_of_four_switches_with_one_gpu_and_one_nic() {
    let l = layout("azure-ndv5");
    assert_eq!(l.gpu_count(), 8);
    assert_eq!(shape(&l), vec![(0, vec![(1, 1); 4]), (1, vec![(1, 1); 4])]);
    let near: Vec<&str> = (0..8).map(|g| l.nics_near(g)[0].as_str()).collect();
    assert_eq!(
        near,
        [
            "0101:00:00.0",
            "0102:00:00.0",
            "0103:00:00.0",
            "0104:00:00.0",
            "0105:00:00.0",
            "0106:00:00.0",
            "0107:00:00.0",
            "0108:00:00.0"
        ]
    );
    assert_eq!(l.gpu(3).unwrap().busid, "0008:00:00.0");
    assert_eq!(l.gpu(4).unwrap().numa_id, 1);
}

#[test]
fn p4d_is_two_sockets_of_two_switches_with_two_gpus_and_one_nic() {
    let l = layout("aws-p4d");
    assert_eq!(shape(&l), vec![(0, vec![(2, 1), (2, 1)]), (1, vec![(2, 1), (2, 1)])]);
    assert_eq!(l.gpu(0).unwrap().busid, "0000:10:1c.0");
    assert_eq!(l.nics_near(0), ["0000:10:1b.0"]);
    assert_eq!(l.nics_near(1), l.nics_near(0), "two GPUs share one EFA NIC");
    assert_eq!(l.nics_near(7), ["0000:a0:1b.0"]);
    assert!(l.switch_of(8).is_none() && l.nics_near(8).is_empty());
}

#[test]
fn builtin_names_and_flat_layouts() {
    assert!(BUILTIN_NAMES.iter().all(|n| builtin(n).is_some()));
    assert_eq!(builtin("dgx-a100"), None);
    let f = flat(4);
    assert_eq!(shape(&f), vec![(0, vec![(4, 0)])]);
    assert_eq!(f.switch_of(3).unwrap().gpus, [0, 1, 2, 3]);
    assert_eq!(flat(200).gpu_count(), MAX_GPUS);
    let mut none = HostDevices::new(flat(0));
    assert_eq!(none.assign(1), None);
    let mut all = HostDevices::new(flat(64));
    assert_eq!(all.assign(64).map(|a| (a.gpus.len(), a.locality)), Some((64, Locality::Switch)));
    assert_eq!(all.free_mask(), 0);
}

#[test]
fn four_two_gpu_pods_each_get_a_whole_switch() {
    for name in ["azure-ndv4", "aws-p4d"] {
        let mut dev = HostDevices::new(layout(name));
        let pods: Vec<DeviceAssignment> = (0..4).map(|_| dev.assign(2).unwrap()).collect();
        let mut used: Vec<u8> = Vec::new();
        for pod in &pods {
            assert_eq!(pod.locality, Locality::Switch, "{name}: {pod:?}");
            let l = dev.layout();
            assert_eq!(l.switch_of(pod.gpus[0]), l.switch_of(pod.gpus[1]), "{name}");
            assert_eq!(pod.nics, l.switch_of(pod.gpus[0]).unwrap().nics, "{name}");
            used.extend(&pod.gpus);
        }
        used.sort_unstable();
        assert_eq!(used, (0..8).collect::<Vec<u8>>(), "{name}: disjoint and complete");
        assert_eq!(dev.assign(1), None);
    }
}

#[test]
fn p4d_four_gpu_pods_stay_within_a_socket() {
    let mut dev = HostDevices::new(layout("aws-p4d"));
    let a = dev.assign(4).unwrap();
    let b = dev.assign(4).unwrap();
    assert_eq!((a.gpus.as_slice(), a.locality), ([0, 1, 2, 3].as_slice(), Locality::Numa));
    assert_eq!((b.gpus.as_slice(), b.locality), ([4, 5, 6, 7].as_slice(), Locality::Numa));
    assert_eq!(a.nics, ["0000:10:1b.0", "0000:20:1b.0"]);
}

#[test]
fn best_fit_packs_small_pods_onto_a_started_switch() {
    let mut dev = HostDevices::new(layout("aws-p4d"));
    assert_eq!(dev.assign(1).unwrap().gpus, [0]);
    // Switch 0 has 1 free, the others 2: the single goes next to the first.
    assert_eq!(dev.assign(1).unwrap().gpus, [1]);
    assert_eq!(dev.assign(2).unwrap().gpus, [2, 3]);
}

#[test]
fn fragmented_host_still_gives_two_gpu_pods_a_whole_switch() {
    let mut dev = HostDevices::new(layout("aws-p4d"));
    let singles: Vec<DeviceAssignment> = (0..4).map(|_| dev.assign(1).unwrap()).collect();
    assert_eq!(singles.iter().map(|a| a.gpus[0]).collect::<Vec<_>>(), [0, 1, 2, 3]);
    dev.release(&singles[0]).unwrap();
    dev.release(&singles[3]).unwrap();
    // One GPU free on switch 0 and one on switch 1, same socket: not taken together.
    assert_eq!((dev.free_on_switch(0, 0), dev.free_on_switch(0, 1)), (1, 1));
    let pod = dev.assign(2).unwrap();
    assert_eq!((pod.gpus.as_slice(), pod.locality), ([4, 5].as_slice(), Locality::Switch));
    // Once no switch has 2 free, the two singles of socket 0 pair up.
    assert_eq!(dev.assign(2).unwrap().gpus, [6, 7]);
    let last = dev.assign(2).unwrap();
    assert_eq!((last.gpus.as_slice(), last.locality), ([0, 3].as_slice(), Locality::Numa));
}

#[test]
fn requests_spanning_groups_use_few_switches_and_sockets() {
    let mut dev = HostDevices::new(layout("aws-p4d"));
    dev.assign(1).unwrap();
    // No switch holds 3; socket 0 has 3 free, socket 1 has 4: best fit takes socket 0.
    let three = dev.assign(3).unwrap();
    assert_eq!((three.gpus.as_slice(), three.locality), ([1, 2, 3].as_slice(), Locality::Numa));
    let mut dev = HostDevices::new(layout("aws-p4d"));
    let six = dev.assign(6).unwrap();
    assert_eq!((six.gpus.as_slice(), six.locality), ([0, 1, 2, 3, 4, 5].as_slice(), Locality::Host));
    assert_eq!(six.nics.len(), 3);
    let mut dev = HostDevices::new(layout("azure-ndv5"));
    assert_eq!(dev.assign(4).map(|a| a.locality), Some(Locality::Numa));
    assert_eq!(dev.assign(5), None, "4 free, nothing changes");
    assert_eq!(dev.free_count(), 4);
    assert_eq!(dev.assign(0), None);
}

#[test]
fn releases_are_checked_before_anything_changes() {
    let mut dev = HostDevices::new(layout("azure-ndv4"));
    let a = dev.assign(2).unwrap();
    dev.release(&a).unwrap();
    assert_eq!(dev.release(&a), Err(ReleaseError::NotAssigned { gpu: a.gpus[0] }));
    let b = dev.assign(3).unwrap();
    let before = dev.free_mask();
    let bogus = DeviceAssignment { gpus: vec![b.gpus[0], 9], nics: Vec::new(), locality: Locality::Host };
    assert_eq!(dev.release(&bogus), Err(ReleaseError::UnknownGpu { gpu: 9, gpu_count: 8 }));
    let twice = DeviceAssignment { gpus: vec![b.gpus[0], b.gpus[0]], ..bogus };
    assert!(matches!(dev.release(&twice), Err(ReleaseError::NotAssigned { .. })));
    assert_eq!(dev.free_mask(), before);
}

fn parse_err(text: &str) -> NcclXmlError {
    parse_nccl_xml(text, "t.xml").expect_err("must be rejected")
}

const SWITCH: &str = r#"<pci busid="ffff:ff:01.0" class="0x060400">"#;

#[test]
fn malformed_files_name_the_line_and_element() {
    let e =
        parse_err("<system>\n<cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" class=\"0x030200\">\n</cpu>\n</system>");
    assert!(matches!(e, NcclXmlError::Syntax { line: 4, .. }), "{e}");
    assert!(e.to_string().starts_with("t.xml: line 4"), "{e}");

    let e = parse_err("<!-- c -->\n<topology/>");
    assert_eq!(e, NcclXmlError::NoSystem { source_name: "t.xml".into(), line: 2, element: "topology".into() });

    let e = parse_err("<system>\n<cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x020700\"/></cpu>\n</system>");
    assert_eq!(e, NcclXmlError::NoGpus { source_name: "t.xml".into() });

    let gpu = |b: &str| format!("<pci busid=\"{b}\" class=\"0x030200\"/>");
    let text = format!(
        "<system>\n<cpu numaid=\"0\">\n{SWITCH}\n{}\n{}\n</pci></cpu></system>",
        gpu("0000:01:00.0"),
        gpu("0000:1:00.0")
    );
    let e = parse_err(&text);
    assert!(matches!(&e, NcclXmlError::BadBusId { line: 5, busid, .. } if busid == "0000:1:00.0"), "{e}");
    assert!(e.to_string().contains("t.xml: line 5: <pci busid=\"0000:1:00.0\">"), "{e}");

    let text = format!(
        "<system>\n<cpu numaid=\"0\">\n{SWITCH}\n{}\n{}\n</pci></cpu></system>",
        gpu("0000:0a:00.0"),
        gpu("00000000:0A:00.0")
    );
    let e = parse_err(&text);
    assert!(matches!(e, NcclXmlError::DuplicateBusId { line: 5, first_line: 4, .. }), "{e}");

    let gpus: String = (0..65).map(|i| gpu(&format!("0000:{i:02x}:00.0")) + "\n").collect();
    let e = parse_err(&format!("<system>\n<cpu numaid=\"0\">\n{gpus}</cpu></system>"));
    assert!(matches!(e, NcclXmlError::TooManyGpus { line: 67, .. }), "{e}");

    let e = parse_err("<system>\n\n<cpu numaid=\"zero\"/></system>");
    assert!(matches!(&e, NcclXmlError::Invalid { line: 3, element, .. } if element == "cpu numaid=\"zero\""), "{e}");
    let e = parse_err("<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0xGPU\"/></cpu></system>");
    assert!(e.to_string().contains("class `0xGPU` is not hex"), "{e}");
    let e = parse_err("<system>\n<pci busid=\"0000:01:00.0\" class=\"0x030200\"/></system>");
    assert_eq!(e.line(), Some(2));
}

#[test]
fn errors_convert_to_the_crate_input_error_keeping_the_line() {
    let e = parse_err("<system>\n<cpu/></system>");
    let input = crate::InputError::from(e);
    assert!(matches!(&input, crate::InputError::Invalid { line: Some(2), field, .. } if field == "cpu"), "{input}");
    assert!(matches!(crate::Error::from(parse_err("<a")), crate::Error::Input(crate::InputError::Syntax { .. })));
}

/// NCCL dump style: `<gpu>`/`<nic>` children, nested switches, a GPU and a NIC on the root
/// complex, devices this reader skips.
const DUMP: &str = r#"<system version="1">
  <cpu numaid="1" arch="x86_64">
    <pci busid="0000:40:01.0" class="0x060400">
      <pci busid="0000:41:00.0" class="0x020700"><nic><net name="mlx5_0" dev="0"/></nic></pci>
      <pci busid="0000:42:00.0" class="0x060400">
        <pci busid="0000:43:00.0" class="0x030200"><gpu dev="1" sm="80"><nvlink target="x" count="12"/></gpu></pci>
        <pci busid="0000:44:00.0" class="0x010802"/>
      </pci>
    </pci>
    <pci busid="0000:07:00.0"><gpu dev="0"/></pci>
    <nic><net name="eth0" dev="1"/></nic>
  </cpu>
</system>"#;

#[test]
fn dump_style_files_nested_switches_and_direct_devices() {
    let l = parse_nccl_xml(DUMP, "dump.xml").unwrap();
    assert_eq!(l.gpu_count(), 2);
    let n = &l.numa()[0];
    let busids: Vec<&str> = n.switches.iter().map(|s| s.busid.as_str()).collect();
    assert_eq!(busids, ["0000:40:01.0", "0000:42:00.0", "0000:07:00.0"]);
    assert_eq!(n.switches[1].parent.as_deref(), Some("0000:40:01.0"));
    assert!(n.switches[2].direct && !n.switches[1].direct);
    assert_eq!(n.nics, ["eth0"]);
    // GPU 0 is the root-complex one (lower bus id); its nearest NICs are the NUMA node's.
    assert_eq!((l.gpu(0).unwrap().busid.as_str(), l.nics_near(0)), ("0000:07:00.0", ["eth0".to_string()].as_slice()));
    // GPU 1's switch has no NIC; the enclosing switch has the HCA.
    assert_eq!(l.switch_of(1).unwrap().busid, "0000:42:00.0");
    assert_eq!(l.nics_near(1), ["0000:41:00.0"]);
    let mut dev = HostDevices::new(l);
    assert_eq!(
        dev.assign(2).map(|a| (a.locality, a.nics)),
        Some((Locality::Numa, vec!["eth0".into(), "0000:41:00.0".into()]))
    );
}

#[test]
fn bus_ids_compare_numerically() {
    assert_eq!(busid_key("0000:0a:1f.7"), busid_key("00000000:0A:1F.7"));
    assert!(busid_key("0001:00:00.0") > busid_key("0000:ff:1f.7"));
    for bad in ["", "0000:0a:00", "0000:0a:20.0", "0000:0a:00.8", "+000:0a:00.0", "0:0:0:00.0", "000000000:00:00.0"] {
        assert_eq!(busid_key(bad), None, "{bad}");
    }
}

#[derive(Clone, Debug)]
enum Op {
    Assign(u8),
    Release(usize),
    ReleaseAgain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![3 => (1u8..=9).prop_map(Op::Assign), 2 => any::<usize>().prop_map(Op::Release), 1 => Just(Op::ReleaseAgain)]
}

fn mask(gpus: &[u8]) -> u64 {
    gpus.iter().fold(0, |m, &g| m | (1 << g))
}

proptest! {
    #[test]
    fn allocator_never_double_books_and_prefers_switches(
        which in 0..BUILTIN_NAMES.len(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut dev = HostDevices::new(layout(BUILTIN_NAMES[which]));
        let l = dev.layout().clone();
        let all = mask(&(0..l.gpu_count()).collect::<Vec<_>>());
        let mut live: Vec<DeviceAssignment> = Vec::new();
        let mut released: Option<DeviceAssignment> = None;
        for op in ops {
            match op {
                Op::Assign(k) => {
                    let free_before = dev.free_mask();
                    let best_switch = (0..l.numa().len())
                        .flat_map(|n| (0..l.numa()[n].switches.len()).map(move |s| (n, s)))
                        .map(|(n, s)| dev.free_on_switch(n, s)).max().unwrap_or(0);
                    let best_numa = (0..l.numa().len()).map(|n| dev.free_on_numa(n)).max().unwrap_or(0);
                    let got = dev.assign(k);
                    prop_assert_eq!(got.is_some(), u32::from(k) <= free_before.count_ones());
                    let Some(a) = got else {
                        prop_assert_eq!(dev.free_mask(), free_before);
                        continue;
                    };
                    prop_assert_eq!(a.gpus.len(), usize::from(k));
                    prop_assert!(a.gpus.windows(2).all(|w| w[0] < w[1]));
                    let m = mask(&a.gpus);
                    prop_assert_eq!(m & !free_before, 0, "handed out a busy GPU");
                    prop_assert_eq!(dev.free_mask(), free_before & !m);
                    let expected = if best_switch >= k { Locality::Switch }
                        else if best_numa >= k { Locality::Numa } else { Locality::Host };
                    prop_assert_eq!(a.locality, expected);
                    let one_switch = a.gpus.iter().all(|&g| l.switch_of(g) == l.switch_of(a.gpus[0]));
                    let one_numa = a.gpus.iter().all(|&g| l.numa_of(g) == l.numa_of(a.gpus[0]));
                    prop_assert_eq!(a.locality == Locality::Switch, one_switch);
                    prop_assert_eq!(a.locality == Locality::Host, !one_numa);
                    prop_assert!(!a.nics.is_empty());
                    live.push(a);
                }
                Op::Release(i) if !live.is_empty() => {
                    let a = live.remove(i % live.len());
                    prop_assert_eq!(dev.release(&a), Ok(()));
                    released = Some(a);
                }
                Op::Release(_) => {}
                Op::ReleaseAgain => {
                    if let Some(a) = &released {
                        let before = dev.free_mask();
                        // Fails unless every GPU of it was handed out again since.
                        let reissued = a.gpus.iter().all(|g| !dev.is_free(*g));
                        if !reissued {
                            prop_assert!(dev.release(a).is_err());
                            prop_assert_eq!(dev.free_mask(), before);
                        }
                    }
                }
            }
            let busy: Vec<u64> = live.iter().map(|a| mask(&a.gpus)).collect();
            let union = busy.iter().fold(0, |u, m| u | m);
            prop_assert_eq!(busy.iter().map(|m| m.count_ones()).sum::<u32>(), union.count_ones(), "a GPU is in two pods");
            prop_assert_eq!(dev.free_mask(), all & !union);
            let per_numa: u32 = (0..l.numa().len()).map(|n| u32::from(dev.free_on_numa(n))).sum();
            prop_assert_eq!(per_numa, u32::from(dev.free_count()));
        }
    }
}
