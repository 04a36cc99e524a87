//! Reader for NCCL topology XML (`NCCL_TOPO_FILE` / `NCCL_TOPO_DUMP_FILE`) into a [`HostLayout`].
//!
//! The format is a tree: `<system>` > `<cpu numaid>` > `<pci>` elements. A `<pci>` whose class
//! is a PCI bridge (`0x0604xx`) is a PCIe switch and may nest; below the switches sit GPUs
//! (class `0x0302xx` 3D controller or `0x0300xx` VGA, or any `<pci>` with a `<gpu>` child, as
//! NCCL dumps write them) and NICs (class `0x0200xx` Ethernet or `0x0207xx` InfiniBand, or any
//! `<pci>` with a `<nic>` child). A `<nic>` straight under `<cpu>` (a NIC NCCL found outside
//! PCI) is named by its `<net name>` children. Other devices are skipped, but devices below
//! them are still read; other elements (`<nvlink>`, `<net>` details) are ignored.

use roxmltree::{Document, Node};

use super::{Gpu, HostLayout, MAX_GPUS, Numa, Switch};
use crate::InputError;

/// Why an NCCL topology file could not be read. Every variant names the source; all but
/// [`NcclXmlError::NoGpus`] also give the line and the element at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NcclXmlError {
    /// The text is not well-formed XML.
    #[error("{source_name}: line {line}, column {column}: not well-formed XML: {message}")]
    Syntax {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the error, from 1.
        line: u64,
        /// Column of the error, from 1.
        column: u64,
        /// The XML parser's message.
        message: String,
    },
    /// The root element is not `<system>`.
    #[error("{source_name}: line {line}: root element is <{element}>, expected <system>")]
    NoSystem {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the root element.
        line: u64,
        /// The root element's name.
        element: String,
    },
    /// No GPU anywhere below `<system>`.
    #[error("{source_name}: no GPU found (no <pci> with class 0x0300xx/0x0302xx or a <gpu> child)")]
    NoGpus {
        /// File (or other source) the text came from.
        source_name: String,
    },
    /// More than [`MAX_GPUS`] GPUs.
    #[error("{source_name}: line {line}: <{element}>: more than {max} GPUs in one host", max = MAX_GPUS)]
    TooManyGpus {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the first GPU past the limit.
        line: u64,
        /// That GPU's element.
        element: String,
    },
    /// A GPU whose `busid` is not `domain:bus:device.function` in hex.
    #[error("{source_name}: line {line}: <{element}>: GPU bus id `{busid}` is not of the form dddd:bb:dd.f")]
    BadBusId {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the GPU.
        line: u64,
        /// The GPU's element.
        element: String,
        /// The bus id as written.
        busid: String,
    },
    /// Two GPUs with one bus id.
    #[error("{source_name}: line {line}: <{element}>: GPU bus id `{busid}` was already used at line {first_line}")]
    DuplicateBusId {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the second GPU.
        line: u64,
        /// Line of the first GPU.
        first_line: u64,
        /// The second GPU's element.
        element: String,
        /// The bus id as written on the second GPU.
        busid: String,
    },
    /// Any other element that cannot be used (missing or malformed attribute, misplaced element).
    #[error("{source_name}: line {line}: <{element}>: {message}")]
    Invalid {
        /// File (or other source) the text came from.
        source_name: String,
        /// Line of the element.
        line: u64,
        /// The element, with its identifying attribute.
        element: String,
        /// What is wrong with it.
        message: String,
    },
}

impl NcclXmlError {
    /// The source the error is about.
    pub fn source_name(&self) -> &str {
        match self {
            NcclXmlError::Syntax { source_name, .. }
            | NcclXmlError::NoSystem { source_name, .. }
            | NcclXmlError::NoGpus { source_name }
            | NcclXmlError::TooManyGpus { source_name, .. }
            | NcclXmlError::BadBusId { source_name, .. }
            | NcclXmlError::DuplicateBusId { source_name, .. }
            | NcclXmlError::Invalid { source_name, .. } => source_name,
        }
    }

    /// The line the error is about, when there is one.
    pub fn line(&self) -> Option<u64> {
        match self {
            NcclXmlError::NoGpus { .. } => None,
            NcclXmlError::Syntax { line, .. }
            | NcclXmlError::NoSystem { line, .. }
            | NcclXmlError::TooManyGpus { line, .. }
            | NcclXmlError::BadBusId { line, .. }
            | NcclXmlError::DuplicateBusId { line, .. }
            | NcclXmlError::Invalid { line, .. } => Some(*line),
        }
    }
}

impl From<NcclXmlError> for InputError {
    /// The crate-wide input error, for callers that collect every reader's errors alike.
    fn from(e: NcclXmlError) -> InputError {
        match &e {
            NcclXmlError::Syntax { source_name, .. } => InputError::syntax(source_name, &e),
            NcclXmlError::NoSystem { element, .. }
            | NcclXmlError::TooManyGpus { element, .. }
            | NcclXmlError::BadBusId { element, .. }
            | NcclXmlError::DuplicateBusId { element, .. }
            | NcclXmlError::Invalid { element, .. } => {
                InputError::invalid(e.source_name(), e.line(), element.clone(), e.to_string())
            }
            NcclXmlError::NoGpus { source_name } => InputError::invalid(source_name, None, "system", e.to_string()),
        }
    }
}

impl From<NcclXmlError> for crate::Error {
    fn from(e: NcclXmlError) -> crate::Error {
        crate::Error::Input(e.into())
    }
}

/// Reads an NCCL topology file into a [`HostLayout`]. `source_name` (usually the file name)
/// only labels errors.
///
/// GPUs are numbered in ascending PCI bus id order (the `CUDA_DEVICE_ORDER=PCI_BUS_ID`
/// numbering), not in file order. NUMA nodes and switches keep file order. A GPU attached to
/// its CPU without a switch becomes a [`Switch`] of its own with `direct: true`.
pub fn parse_nccl_xml(text: &str, source_name: &str) -> Result<HostLayout, NcclXmlError> {
    let doc = Document::parse(text).map_err(|e| NcclXmlError::Syntax {
        source_name: source_name.to_string(),
        line: u64::from(e.pos().row),
        column: u64::from(e.pos().col),
        message: e.to_string(),
    })?;
    let root = doc.root_element();
    let mut reader = Reader { doc: &doc, source_name, numa: Vec::new(), gpus: Vec::new() };
    if root.tag_name().name() != "system" {
        return Err(NcclXmlError::NoSystem {
            source_name: source_name.to_string(),
            line: reader.line(root),
            element: root.tag_name().name().to_string(),
        });
    }
    for child in root.children().filter(Node::is_element) {
        match child.tag_name().name() {
            "cpu" => reader.cpu(child)?,
            "pci" | "gpu" | "nic" => return Err(reader.invalid(child, "device outside any <cpu>")),
            _ => {}
        }
    }
    reader.finish()
}

/// A GPU before numbering.
struct RawGpu {
    key: u64,
    busid: String,
    line: u64,
    element: String,
    at: (usize, usize),
}

/// Where the walk is: which NUMA node and which innermost switch.
#[derive(Clone, Copy)]
struct Ctx {
    numa: usize,
    switch: Option<usize>,
}

struct Reader<'d, 'input, 's> {
    doc: &'d Document<'input>,
    source_name: &'s str,
    numa: Vec<Numa>,
    gpus: Vec<RawGpu>,
}

impl Reader<'_, '_, '_> {
    fn line(&self, node: Node) -> u64 {
        u64::from(self.doc.text_pos_at(node.range().start).row)
    }

    fn invalid(&self, node: Node, message: impl Into<String>) -> NcclXmlError {
        NcclXmlError::Invalid {
            source_name: self.source_name.to_string(),
            line: self.line(node),
            element: describe(node),
            message: message.into(),
        }
    }

    fn cpu(&mut self, node: Node) -> Result<(), NcclXmlError> {
        let Some(raw) = node.attribute("numaid") else { return Err(self.invalid(node, "missing attribute `numaid`")) };
        let Ok(id) = raw.trim().parse::<i32>() else {
            return Err(self.invalid(node, format!("`numaid` `{raw}` is not an integer")));
        };
        if self.numa.iter().any(|n| n.id == id) {
            return Err(self.invalid(node, format!("a second <cpu> with numaid {id}")));
        }
        self.numa.push(Numa { id, switches: Vec::new(), nics: Vec::new() });
        self.children(node, Ctx { numa: self.numa.len() - 1, switch: None })
    }

    fn children(&mut self, node: Node, ctx: Ctx) -> Result<(), NcclXmlError> {
        for child in node.children().filter(Node::is_element) {
            match child.tag_name().name() {
                "pci" => self.pci(child, ctx)?,
                "nic" => {
                    let name = net_name(child).ok_or_else(|| self.invalid(child, "NIC without a <net name=..>"))?;
                    self.add_nic(name.to_string(), ctx);
                }
                "gpu" => return Err(self.invalid(child, "<gpu> outside a <pci> element: its bus id is unknown")),
                _ => {}
            }
        }
        Ok(())
    }

    fn pci(&mut self, node: Node, ctx: Ctx) -> Result<(), NcclXmlError> {
        let class = match node.attribute("class") {
            None => None,
            Some(raw) => Some(parse_hex(raw).ok_or_else(|| self.invalid(node, format!("class `{raw}` is not hex")))?),
        };
        let has = |name: &str| node.children().any(|c| c.tag_name().name() == name);
        let class_is = |prefixes: &[u32]| class.is_some_and(|c| prefixes.contains(&(c >> 8)));
        if has("gpu") || class_is(&[0x0302, 0x0300]) {
            self.gpu(node, ctx)
        } else if has("nic") || class_is(&[0x0200, 0x0207]) {
            let name = match node.attribute("busid").or_else(|| node.children().find_map(net_name)) {
                Some(name) => name.trim().to_string(),
                None => return Err(self.invalid(node, "NIC without `busid`")),
            };
            self.add_nic(name, ctx);
            Ok(())
        } else if class_is(&[0x0604]) {
            let Some(busid) = node.attribute("busid") else {
                return Err(self.invalid(node, "PCIe switch without `busid`"));
            };
            let switches = &mut self.numa[ctx.numa].switches;
            let parent = ctx.switch.map(|s| switches[s].busid.clone());
            let busid = busid.trim().to_string();
            switches.push(Switch { busid, parent, gpus: Vec::new(), nics: Vec::new(), direct: false });
            let inner = Ctx { numa: ctx.numa, switch: Some(switches.len() - 1) };
            self.children(node, inner)
        } else {
            // A device we do not track (storage, a host bridge); what hangs below it still
            // shares the enclosing switch.
            self.children(node, ctx)
        }
    }

    fn gpu(&mut self, node: Node, ctx: Ctx) -> Result<(), NcclXmlError> {
        let line = self.line(node);
        let element = describe(node);
        let source_name = self.source_name.to_string();
        if self.gpus.len() >= usize::from(MAX_GPUS) {
            return Err(NcclXmlError::TooManyGpus { source_name, line, element });
        }
        let busid = node.attribute("busid").unwrap_or("").trim().to_string();
        let Some(key) = busid_key(&busid) else {
            return Err(NcclXmlError::BadBusId { source_name, line, element, busid });
        };
        let switches = &mut self.numa[ctx.numa].switches;
        let switch = match ctx.switch {
            Some(s) => s,
            None => {
                let direct =
                    Switch { busid: busid.clone(), parent: None, gpus: Vec::new(), nics: Vec::new(), direct: true };
                switches.push(direct);
                switches.len() - 1
            }
        };
        self.gpus.push(RawGpu { key, busid, line, element, at: (ctx.numa, switch) });
        Ok(())
    }

    fn add_nic(&mut self, name: String, ctx: Ctx) {
        let numa = &mut self.numa[ctx.numa];
        match ctx.switch {
            Some(s) => numa.switches[s].nics.push(name),
            None => numa.nics.push(name),
        }
    }

    fn finish(mut self) -> Result<HostLayout, NcclXmlError> {
        if self.gpus.is_empty() {
            return Err(NcclXmlError::NoGpus { source_name: self.source_name.to_string() });
        }
        // Stable: among equal bus ids, file order stays, so the later line is reported.
        self.gpus.sort_by_key(|g| g.key);
        if let Some(pair) = self.gpus.windows(2).find(|w| w[0].key == w[1].key) {
            let (first, second) = (&pair[0], &pair[1]);
            return Err(NcclXmlError::DuplicateBusId {
                source_name: self.source_name.to_string(),
                line: second.line,
                first_line: first.line,
                element: second.element.clone(),
                busid: second.busid.clone(),
            });
        }
        let mut gpus = Vec::with_capacity(self.gpus.len());
        for (index, raw) in (0u8..).zip(self.gpus) {
            let numa = &mut self.numa[raw.at.0];
            let switch = &mut numa.switches[raw.at.1];
            switch.gpus.push(index);
            gpus.push(Gpu { index, busid: raw.busid, numa_id: numa.id, switch: switch.busid.clone(), at: raw.at });
        }
        Ok(HostLayout::new(self.numa, gpus))
    }
}

/// `tag busid="…"` (or `numaid`, `name`): enough to find the element in the file.
fn describe(node: Node) -> String {
    let tag = node.tag_name().name();
    ["busid", "numaid", "name"]
        .iter()
        .find_map(|a| node.attribute(*a).map(|v| format!("{tag} {a}=\"{v}\"")))
        .unwrap_or_else(|| tag.to_string())
}

/// The `name` of the first `<net>` below a `<nic>`.
fn net_name<'a>(nic: Node<'a, '_>) -> Option<&'a str> {
    if nic.tag_name().name() != "nic" {
        return None;
    }
    nic.children().filter(|c| c.tag_name().name() == "net").find_map(|n| n.attribute("name"))
}

/// `0x030200` (or without `0x`) as a number.
fn parse_hex(raw: &str) -> Option<u32> {
    let digits = raw.trim();
    let digits = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")).unwrap_or(digits);
    hex_field(digits, 8)
}

/// A hex field of 1 to `max_len` digits. `from_str_radix` alone would also take a sign.
fn hex_field(s: &str, max_len: usize) -> Option<u32> {
    if s.is_empty() || s.len() > max_len || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// Sort key of a bus id `domain:bus:device.function` (domain up to 8 hex digits as
/// `nvidia-smi` writes it, bus 2, device 2 up to 0x1f, function 0-7), compared numerically so
/// that `0000:0a:00.0` and `00000000:0A:00.0` are the same device.
pub(crate) fn busid_key(busid: &str) -> Option<u64> {
    let mut parts = busid.split(':');
    let (domain, bus, rest) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (device, function) = rest.split_once('.')?;
    let domain = hex_field(domain, 8)?;
    let bus = if bus.len() == 2 { hex_field(bus, 2)? } else { return None };
    let device = if device.len() == 2 { hex_field(device, 2).filter(|&d| d <= 0x1f)? } else { return None };
    let function = hex_field(function, 1).filter(|&f| f <= 7)?;
    Some((u64::from(domain) << 16) | u64::from(bus << 8 | device << 3 | function))
}
