#!/usr/bin/env bash
# check.sh TARBALL: proves that an image tarball written by scripts/image/build.py (or any one-image
# OCI layout + docker-archive tarball, as `docker save` of Docker 25+ writes) is well formed and
# self-contained, without a container engine.
#
#   * structure: oci-layout, index.json -> manifest -> config and layers; every blob's sha256 is
#     its name; descriptor sizes match; the config's diff_ids are the layers' uncompressed sha256;
#     the docker-archive manifest.json names the same config and layers as index.json, under the
#     same image name;
#   * safety: the config's User is a numeric non-root uid (what the chart's runAsNonRoot needs);
#     the layer has no shell (/bin/sh, bash, busybox, ...), no path escaping the root, and every
#     symlink in it lands on something the layer holds;
#   * it runs: the layers are unpacked into a directory and `trainyard --version` is run there
#     with chroot, as root and as the image's user (--userspec), with only the image's Env. The
#     binary can only start if its loader and every library it needs are in the image.
#
# Prints one line per check (ok / FAIL / skip) and a summary; exits 1 if any check failed, 2 on
# bad usage. chroot needs root; without it `unshare -r chroot` is tried (unprivileged user
# namespaces), and the run as the image's user is then skipped (only uid 0 is mapped there).
# Needs bash, python3 (stdlib), tar, gzip, chroot.
set -uo pipefail

if [ $# -ne 1 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  echo "usage: $0 TARBALL" >&2
  exit 2
fi
tarball=$1
if [ ! -f "$tarball" ]; then
  echo "check.sh: $tarball: no such file" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
archive=$work/archive
root=$work/root
mkdir -p "$archive" "$root"
passed=0
failed=0
skipped=0

ok() { echo "ok    $*"; passed=$((passed + 1)); }
bad() { echo "FAIL  $*"; failed=$((failed + 1)); }
skip() { echo "skip  $*"; skipped=$((skipped + 1)); }

finish() {
  echo "image check: $passed passed, $failed failed, $skipped skipped"
  if [ "$failed" -ne 0 ]; then
    echo "check.sh: $tarball is NOT a valid self-contained non-root trainyard image (see the FAIL lines)" >&2
    exit 1
  fi
  exit 0
}

if ! tar -xf "$tarball" -C "$archive" 2>"$work/tar.err"; then
  bad "unpack $tarball: $(head -n1 "$work/tar.err")"
  finish
fi
ok "unpack $tarball"

# The structural checks, in Python for JSON and hashing. Each prints an ok/FAIL line; what the
# run checks need (layer paths, user, environment) is left in $work/facts.
python3 - "$archive" "$work/facts" <<'PY' >"$work/structure.out"
import gzip, hashlib, json, os, platform, posixpath, re, sys, tarfile

archive, facts_dir = sys.argv[1], sys.argv[2]
os.makedirs(facts_dir)
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
LAYER_TYPES = {
    "application/vnd.oci.image.layer.v1.tar+gzip": "gzip",
    "application/vnd.oci.image.layer.v1.tar": "tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip": "gzip",
}
SHELLS = {"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"}
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


class Stop(Exception):
    """A check whose failure leaves nothing sound to check after it."""


def ok(msg):
    print(f"ok    {msg}")


def bad(msg):
    print(f"FAIL  {msg}")


def load_json(rel):
    path = os.path.join(archive, rel)
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        bad(f"{rel}: cannot read as JSON ({e})")
        raise Stop


def sha256_file(path, opener=open):
    h = hashlib.sha256()
    with opener(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def blob(desc, what):
    """Path of the blob a descriptor names, after checking that it exists with that size."""
    digest = desc.get("digest", "")
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        bad(f"{what}: digest {digest!r} is not sha256:<64 hex>")
        raise Stop
    path = os.path.join(archive, "blobs", "sha256", digest[7:])
    if not os.path.isfile(path):
        bad(f"{what}: blob {digest} is missing")
        raise Stop
    size = os.path.getsize(path)
    if size != desc.get("size"):
        bad(f"{what}: blob {digest} has {size} bytes, the descriptor says {desc.get('size')}")
        raise Stop
    ok(f"{what}: {digest[:19]}... present, {size} bytes as described")
    return path


def normalize(ref):
    """Docker's normalization: trainyard:0.1.0 -> docker.io/library/trainyard:0.1.0."""
    first, slash, rest = ref.partition("/")
    if slash and (first == "localhost" or "." in first or ":" in first):
        domain, path = first, rest
    else:
        domain, path = "docker.io", ref
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    if ":" not in path.rsplit("/", 1)[-1]:
        path += ":latest"
    return f"{domain}/{path}"


def check():
    layout = load_json("oci-layout")
    if layout.get("imageLayoutVersion") != "1.0.0":
        bad(f"oci-layout: imageLayoutVersion {layout.get('imageLayoutVersion')!r}, want 1.0.0")
        raise Stop
    ok("oci-layout: version 1.0.0")

    # Every blob, referenced or not, must be what its name says.
    blob_dir = os.path.join(archive, "blobs", "sha256")
    names = sorted(os.listdir(blob_dir)) if os.path.isdir(blob_dir) else []
    wrong = [n for n in names if sha256_file(os.path.join(blob_dir, n)) != "sha256:" + n]
    if not names or wrong:
        bad(f"blob digests: {'no blobs' if not names else 'content differs from the name of ' + ', '.join(wrong)}")
        raise Stop
    ok(f"blob digests: all {len(names)} blobs hash to their names")

    index = load_json("index.json")
    manifests = index.get("manifests") or []
    if index.get("schemaVersion") != 2 or len(manifests) != 1:
        bad(f"index.json: want schemaVersion 2 and one manifest, got {index.get('schemaVersion')} and {len(manifests)}")
        raise Stop
    mdesc = manifests[0]
    annotations = mdesc.get("annotations") or {}
    image_name = annotations.get("io.containerd.image.name", "")
    ref_name = annotations.get("org.opencontainers.image.ref.name", "")
    if mdesc.get("mediaType") != MT_MANIFEST or not ref_name:
        bad(f"index.json: the manifest descriptor needs mediaType {MT_MANIFEST} and org.opencontainers.image.ref.name")
        raise Stop
    ok(f"index.json: one image manifest, ref.name {ref_name!r}, name {image_name or '(none)'!r}")

    manifest = load_json(os.path.relpath(blob(mdesc, "index.json -> manifest"), archive))
    if manifest.get("schemaVersion") != 2 or manifest.get("mediaType", MT_MANIFEST) != MT_MANIFEST:
        bad("manifest: not an OCI image manifest (schemaVersion 2)")
        raise Stop
    config_path = blob(manifest.get("config") or {}, "manifest -> config")
    layers = manifest.get("layers") or []
    if not layers:
        bad("manifest: no layers")
        raise Stop
    layer_paths = []
    for i, ldesc in enumerate(layers):
        kind = LAYER_TYPES.get(ldesc.get("mediaType"))
        if kind is None:
            bad(f"manifest: layer {i} has media type {ldesc.get('mediaType')!r}")
            raise Stop
        layer_paths.append((blob(ldesc, f"manifest -> layer {i}"), kind))

    config = load_json(os.path.relpath(config_path, archive))
    cfg = config.get("config") or {}
    arch, os_name = config.get("architecture"), config.get("os")
    if os_name != "linux" or arch != HOST_ARCH:
        bad(f"config: platform {os_name}/{arch}; this host runs linux/{HOST_ARCH}, so it cannot run the binary")
    else:
        ok(f"config: platform linux/{arch}")
    plat = mdesc.get("platform")
    if plat is not None and (plat.get("os"), plat.get("architecture")) != (os_name, arch):
        bad(f"index.json: platform {plat} differs from the config's {os_name}/{arch}")

    user = cfg.get("User", "")
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or int(uid) == 0 or (gid and not gid.isdigit()):
        bad(f"config: User {user!r} must be a numeric non-root uid[:gid] (Kubernetes' runAsNonRoot checks the uid)")
    else:
        ok(f"config: User {user} (non-root)")
    entrypoint = cfg.get("Entrypoint") or []
    if entrypoint != ["/usr/local/bin/trainyard"]:
        bad(f"config: Entrypoint {entrypoint}, want ['/usr/local/bin/trainyard']")
    else:
        ok("config: Entrypoint /usr/local/bin/trainyard")

    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    actual = [sha256_file(p, gzip.open if kind == "gzip" else open) for p, kind in layer_paths]
    if diff_ids != actual:
        bad(f"config: rootfs.diff_ids {diff_ids} are not the uncompressed layers' {actual}")
    else:
        ok(f"config: diff_ids are the sha256 of the {len(actual)} uncompressed layer(s)")

    # The docker-archive view must describe the same image.
    docker = load_json("manifest.json")
    want_config = "blobs/sha256/" + manifest["config"]["digest"][7:]
    want_layers = ["blobs/sha256/" + l["digest"][7:] for l in layers]
    if not isinstance(docker, list) or len(docker) != 1:
        bad("manifest.json: want a list with one image")
    else:
        d = docker[0]
        tags = d.get("RepoTags") or []
        problems = []
        if d.get("Config") != want_config:
            problems.append(f"Config {d.get('Config')} != {want_config}")
        if d.get("Layers") != want_layers:
            problems.append(f"Layers {d.get('Layers')} != {want_layers}")
        if not tags:
            problems.append("no RepoTags")
        elif image_name and normalize(tags[0]) != image_name:
            problems.append(f"RepoTags[0] {tags[0]} is not {image_name}")
        elif normalize(tags[0]).rsplit(":", 1)[1] != ref_name.rsplit(":", 1)[-1]:
            problems.append(f"RepoTags[0] {tags[0]} does not carry the tag {ref_name}")
        if problems:
            bad("manifest.json disagrees with index.json: " + "; ".join(problems))
        else:
            ok(f"manifest.json: same config and layers as index.json, RepoTags {tags}")

    # What the layers hold, before anything is unpacked.
    members, escaping = {}, []
    for p, kind in layer_paths:
        with tarfile.open(p, "r:gz" if kind == "gzip" else "r:") as tar:
            for m in tar:
                name = posixpath.normpath(m.name.removeprefix("./"))
                if m.name.startswith("/") or name == ".." or name.startswith("../"):
                    escaping.append(m.name)
                members[name] = m
    whiteouts = [n for n in members if posixpath.basename(n).startswith(".wh.")]
    if escaping or whiteouts:
        bad(f"layers: entries outside the root {escaping} or whiteouts {whiteouts} (unpacked here as plain tars)")
        raise Stop
    shells = sorted(n for n in members if posixpath.basename(n) in SHELLS)
    if shells:
        bad(f"layers: shells in the image: {', '.join('/' + s for s in shells)}")
    else:
        ok("layers: no /bin/sh nor any other shell")
    binary = members.get("usr/local/bin/trainyard")
    if binary is None or not binary.isfile() or not binary.mode & 0o111:
        bad("layers: /usr/local/bin/trainyard is missing or not an executable file")
    else:
        ok(f"layers: /usr/local/bin/trainyard, {binary.size} bytes, mode {binary.mode:o}")

    # Every symlink must land inside the image (a link to a host path would hide a missing file).
    dangling = []
    for name, m in members.items():
        seen, cur = set(), m
        path = name
        while cur is not None and cur.issym() and path not in seen:
            seen.add(path)
            t = cur.linkname
            path = posixpath.normpath(t.lstrip("/") if t.startswith("/") else posixpath.join(posixpath.dirname(path), t))
            cur = members.get(path)
        if cur is None:
            dangling.append(f"/{name} -> {m.linkname}")
    if dangling:
        bad(f"layers: symlinks to nothing in the image: {', '.join(dangling)}")
    else:
        ok(f"layers: all {sum(m.issym() for m in members.values())} symlink(s) resolve inside the image")

    unpacked = sum(m.size for m in members.values() if m.isfile())
    compressed = sum(l.get("size", 0) for l in layers)
    with open(os.path.join(facts_dir, "layers"), "w") as f:
        f.writelines(f"{p}\n" for p, _ in layer_paths)
    with open(os.path.join(facts_dir, "user"), "w") as f:
        f.write(user)
    with open(os.path.join(facts_dir, "env"), "wb") as f:
        f.write(b"".join(e.encode() + b"\0" for e in cfg.get("Env") or []))
    with open(os.path.join(facts_dir, "summary"), "w") as f:
        f.write(f"{image_name or ref_name} {mdesc['digest']}: {compressed} bytes of layers, {unpacked} bytes unpacked")


try:
    check()
except Stop:
    pass
PY
status=$?
cat "$work/structure.out"
passed=$((passed + $(grep -c '^ok ' "$work/structure.out")))
failed=$((failed + $(grep -c '^FAIL ' "$work/structure.out")))
if [ "$status" -ne 0 ]; then
  bad "structure checks: python3 exited with $status"
fi
if [ ! -f "$work/facts/layers" ]; then
  finish # a structural failure: nothing sound to unpack and run
fi

# Unpack the layers in order, as a container runtime would (no whiteouts: checked above).
while IFS= read -r layer; do
  if ! tar -xf "$layer" -C "$root" --numeric-owner 2>"$work/tar.err"; then
    bad "unpack layer $(basename "$layer"): $(head -n1 "$work/tar.err")"
    finish
  fi
done <"$work/facts/layers"
if [ -e "$root/bin/sh" ] || [ -L "$root/bin/sh" ]; then
  bad "unpacked root: /bin/sh exists"
else
  ok "unpacked root: no /bin/sh"
fi

# chroot needs CAP_SYS_CHROOT: root, or root in a new user namespace.
if [ "$(id -u)" -eq 0 ]; then
  runner=(chroot)
elif unshare -r true 2>/dev/null; then
  runner=(unshare -r chroot)
else
  bad "run: chroot needs root, and unprivileged user namespaces (unshare -r) are not available"
  finish
fi
user=$(cat "$work/facts/user")
mapfile -d '' env <"$work/facts/env"

# run NAME [CHROOT-OPTIONS...]: trainyard --version in the unpacked root, with the image's Env only
# (nothing from this host's environment, e.g. LD_LIBRARY_PATH, can help the loader).
run() {
  local name=$1 out rc
  shift
  out=$(env -i "${env[@]}" "${runner[@]}" "$@" "$root" /usr/local/bin/trainyard --version 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && [[ $out == trainyard* ]]; then
    ok "$name: $(head -n1 <<<"$out")"
  else
    bad "$name: exit $rc, output: $(head -c 400 <<<"$out")"
  fi
}
run "run as root: ${runner[*]} ROOT /usr/local/bin/trainyard --version"
if [ "${runner[0]}" = chroot ]; then
  run "run as $user: chroot --userspec=$user ROOT /usr/local/bin/trainyard --version" --userspec="$user"
else
  skip "run as $user: only uid 0 is mapped in an unprivileged user namespace; run check.sh as root"
fi

echo "image: $(cat "$work/facts/summary"); tarball $(stat -c %s "$tarball") bytes"
finish
