#!/usr/bin/env python3
"""Build trainyard's container image from a built binary, without a container engine.

Usage:
    build.py --binary PATH --out TARBALL [--tag NAME:TAG] [--version V] [--revision GITSHA]

    cargo build --release --bin trainyard
    python3 scripts/image/build.py --binary target/release/trainyard \\
        --out target/image/trainyard.tar --tag trainyard:0.1.0

The image holds one layer: the binary at /usr/local/bin/trainyard, exactly the shared libraries
`ldd` says it needs (with the ELF interpreter and the symlinks the loader follows), /etc/passwd and
/etc/group with root and nonroot (65532), a minimal /etc/nsswitch.conf, /tmp, /home/nonroot and
the host's CA bundle if it has one. No shell. It runs as 65532:65532 with the binary as
entrypoint, like the distroless image the Containerfile builds.

TARBALL is a single uncompressed tar that is at once
  * an OCI image layout (oci-layout, index.json, blobs/sha256/...), and
  * a docker-archive (manifest.json with RepoTags, Config and Layers pointing into blobs/sha256),
the same double format `docker save` writes since Docker 25. `podman load -i`, `docker load -i`,
`ctr -n k8s.io images import` and `kind load image-archive` accept it. As Docker does, index.json
names the image twice: io.containerd.image.name holds the full name (docker.io/library/trainyard:
0.1.0; containerd and podman use it) and org.opencontainers.image.ref.name the tag alone.

Reproducible: the same binary, libraries, CA bundle, arguments and SOURCE_DATE_EPOCH give a
byte-identical tarball. Every timestamp (file mtimes, the config's `created`) is SOURCE_DATE_EPOCH,
or 0 when it is unset; entries are sorted, owned by 0:0 (but /home/nonroot), with fixed modes; the
gzip header carries no name and mtime 0. The gzip stream also depends on the zlib build, so the
same host (or image) should be used to compare digests.

Defaults: --version is the workspace version in Cargo.toml, --tag is trainyard:<version>,
--revision is `git rev-parse HEAD` of the repository (the label is left out when git cannot tell).

Prints the manifest digest (sha256:...; what a registry or `image.tag: sha256:...` refers to) and
the tarball path on stdout; progress goes to stderr. Needs python3 (stdlib only) and ldd.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

BINARY_PATH = "usr/local/bin/trainyard"
NONROOT = 65532
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# The same PATH as the distroless base of the Containerfile, so both images behave alike.
ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MT_INDEX = "application/vnd.oci.image.index.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

# zlib's default level: about a third of level 9's time for a few percent more bytes.
GZIP_LEVEL = 6
CHUNK = 1 << 20

# ELF e_machine -> OCI architecture (and variant). Only hosts whose libraries we can copy.
ELF_MACHINES = {62: ("amd64", None), 183: ("arm64", "v8")}
HOST_MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}

PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = f"root:x:0:\nnonroot:x:{NONROOT}:\n"
# glibc reads this for user, group and host lookups; `files dns` needs no libnss_* module since
# glibc 2.34 (both are built into libc.so.6), so nothing beyond ldd's list has to be copied.
NSSWITCH = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n"


def fail(msg):
    print(f"build.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def log(msg):
    print(f"build.py: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Inspecting the binary


def elf_info(path):
    """(architecture, variant, interpreter or None) from the ELF header of `path`.

    The interpreter comes from PT_INTERP, which is the exact path the kernel opens to start the
    binary; it must exist at that path in the image whatever ldd prints."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != b"\x7fELF":
            fail(f"{path} is not an ELF file")
        if head[4] != 2 or head[5] != 1:
            fail(f"{path}: only 64-bit little-endian ELF is supported (amd64, arm64)")
        (machine,) = struct.unpack_from("<H", head, 18)
        if machine not in ELF_MACHINES:
            fail(f"{path}: ELF machine {machine} is neither x86-64 nor aarch64")
        arch, variant = ELF_MACHINES[machine]
        (phoff,) = struct.unpack_from("<Q", head, 32)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        interp = None
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(56)
            (p_type,) = struct.unpack_from("<I", ph, 0)
            if p_type == 3:  # PT_INTERP
                (p_offset,) = struct.unpack_from("<Q", ph, 8)
                (p_filesz,) = struct.unpack_from("<Q", ph, 32)
                f.seek(p_offset)
                interp = f.read(p_filesz).rstrip(b"\0").decode()
    return arch, variant, interp


def ldd_paths(binary):
    """The absolute paths of the shared objects the loader maps for `binary`, as ldd reports them.

    ldd resolves the whole dependency tree with the host's loader and ld.so.cache, so its paths are
    the ones that exist on this host; the image keeps them, and the loader finds them there through
    its built-in default directories (the image has no ld.so.cache)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"ldd {binary} failed: {out.stderr.strip() or out.stdout.strip()}")
    paths, missing = [], []
    for line in out.stdout.splitlines():
        if m := re.match(r"^\s*(\S+)\s+=>\s+not found", line):
            missing.append(m.group(1))
        elif m := re.match(r"^\s*\S+\s+=>\s+(/\S+)\s+\(0x[0-9a-f]+\)", line):
            paths.append(m.group(1))
        elif m := re.match(r"^\s*(/\S+)\s+\(0x[0-9a-f]+\)", line):
            paths.append(m.group(1))  # the interpreter
        # Anything else (linux-vdso.so.1, linux-gate.so.1) is mapped by the kernel: no file.
    if missing:
        fail(f"ldd cannot find {', '.join(missing)} for {binary}")
    return paths


def follow(path):
    """The chain of symlinks from `path` to a regular file, as image entries.

    Returns ([(link, target-as-written)], final path). Only the last component is followed, and
    relative targets are resolved lexically: in the image every directory is a real directory (the
    host's /lib -> usr/lib is not copied), so the lexical resolution is exactly what the loader will
    do there. The symlink texts are kept, so the paths the loader asks for all exist."""
    links, seen = [], set()
    while os.path.islink(path):
        if path in seen:
            fail(f"symlink loop at {path}")
        seen.add(path)
        target = os.readlink(path)
        links.append((path, target))
        path = os.path.normpath(target if os.path.isabs(target) else os.path.join(os.path.dirname(path), target))
    return links, path


# ---------------------------------------------------------------------------------------------
# The layer


class Entry:
    """One layer member; files take their bytes from `source` (a host path) or `data`."""

    def __init__(self, path, kind, mode, uid=0, gid=0, source=None, data=None, target=None):
        self.path, self.kind, self.mode = path.strip("/"), kind, mode
        self.uid, self.gid, self.source, self.data, self.target = uid, gid, source, data, target


def layer_entries(binary, lib_paths, ca_bundle):
    entries = {}

    def add(entry):
        old = entries.get(entry.path)
        if old is not None and (old.kind, old.source, old.target) != (entry.kind, entry.source, entry.target):
            fail(f"two different entries for /{entry.path}")
        entries[entry.path] = entry

    add(Entry(BINARY_PATH, "file", 0o755, source=binary))
    for lib in lib_paths:
        links, real = follow(lib)
        for link, target in links:
            add(Entry(link, "symlink", 0o777, target=target))
        # The host may reach `real` through directory symlinks; realpath finds the bytes.
        add(Entry(real, "file", 0o755, source=os.path.realpath(lib)))
    add(Entry("etc/passwd", "file", 0o644, data=PASSWD.encode()))
    add(Entry("etc/group", "file", 0o644, data=GROUP.encode()))
    add(Entry("etc/nsswitch.conf", "file", 0o644, data=NSSWITCH.encode()))
    if ca_bundle:
        # rustls takes its roots from files and the kubeconfig, but HTTPS to slurmrestd (and
        # anything reading SSL_CERT_FILE) may want the system roots.
        add(Entry(CA_BUNDLE, "file", 0o644, source=os.path.realpath(CA_BUNDLE)))
    add(Entry("tmp", "dir", 0o1777))
    add(Entry("root", "dir", 0o700))
    add(Entry("home", "dir", 0o755))
    add(Entry("home/nonroot", "dir", 0o700, uid=NONROOT, gid=NONROOT))

    # Every parent directory gets its own entry, so that modes and owners do not depend on the
    # unpacker's defaults.
    for path in list(entries):
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in entries:
                entries[parent] = Entry(parent, "dir", 0o755)
            elif entries[parent].kind != "dir":
                fail(f"/{parent} is both a directory and a {entries[parent].kind}")
    # Sorted by components, so that each directory precedes what it holds.
    return [entries[p] for p in sorted(entries, key=lambda p: p.split("/"))]


class HashingWriter:
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, out):
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        return self.out.write(b) if self.out is not None else len(b)

    def flush(self):
        if self.out is not None:
            self.out.flush()

    def digest(self):
        return "sha256:" + self.sha.hexdigest()


def tarinfo(name, kind, mode, mtime, uid=0, gid=0, size=0, target=""):
    info = tarfile.TarInfo(name)
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE}[kind]
    info.mode, info.uid, info.gid, info.size, info.linkname = mode, uid, gid, size, target
    # Names are left empty so the unpacker uses the numbers, not the host's user database.
    info.uname = info.gname = ""
    info.mtime = mtime
    return info


def write_layer(entries, mtime, out_file):
    """Write the gzip'd layer tar to out_file; return (diff_id, digest, size)."""
    compressed = HashingWriter(out_file)
    # filename="" and mtime=0 keep the gzip header free of the temp file's name and the clock.
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=0, compresslevel=GZIP_LEVEL) as gz:
        uncompressed = HashingWriter(gz)
        with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
            for e in entries:
                if e.kind != "file":
                    tar.addfile(tarinfo(e.path, e.kind, e.mode, mtime, e.uid, e.gid, target=e.target or ""))
                elif e.data is not None:
                    tar.addfile(tarinfo(e.path, "file", e.mode, mtime, e.uid, e.gid, len(e.data)), io.BytesIO(e.data))
                else:
                    with open(e.source, "rb") as f:
                        size = os.fstat(f.fileno()).st_size
                        tar.addfile(tarinfo(e.path, "file", e.mode, mtime, e.uid, e.gid, size), f)
    return uncompressed.digest(), compressed.digest(), compressed.size


# ---------------------------------------------------------------------------------------------
# Names


def normalize_tag(tag):
    """(full name as containerd stores it, familiar name as Docker's RepoTags, tag).

    The same rules as Docker's reference parser: a first component with a dot or colon, or
    `localhost`, is a registry; otherwise the registry is docker.io, and a one-component name
    lives under library/."""
    if "@" in tag:
        fail(f"--tag {tag}: a digest cannot be a tag; the digest is printed after the build")
    name, sep, version = tag.rpartition(":")
    if not sep or "/" in version:
        name, version = tag, "latest"
    component = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    first, slash, rest = name.partition("/")
    if slash and (first == "localhost" or "." in first or ":" in first):
        domain, path = first, rest
    else:
        domain, path = "docker.io", name
    if not re.fullmatch(rf"{component}(?:/{component})*", path):
        fail(f"--tag {tag}: {path!r} is not a valid repository name (lowercase, digits, . _ -)")
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", version):
        fail(f"--tag {tag}: {version!r} is not a valid tag")
    if domain == "docker.io" and "/" not in path:
        path = "library/" + path
    full = f"{domain}/{path}:{version}"
    if domain == "docker.io":
        familiar = f"{path.removeprefix('library/')}:{version}"
    else:
        familiar = full
    return full, familiar, version


# ---------------------------------------------------------------------------------------------
# Blobs and the archive


def canonical(obj):
    """JSON bytes that depend only on `obj` (sorted keys, no whitespace), so digests are stable."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def descriptor(media_type, data):
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}


def blob_path(digest):
    return "blobs/sha256/" + digest.removeprefix("sha256:")


def write_archive(out, mtime, members):
    """The outer tar: `members` is [(name, bytes or host path)], written sorted."""
    with tarfile.open(out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(tarinfo(d, "dir", 0o755, mtime))
        for name, content in sorted(members, key=lambda m: m[0]):
            if isinstance(content, bytes):
                tar.addfile(tarinfo(name, "file", 0o644, mtime, size=len(content)), io.BytesIO(content))
            else:
                with open(content, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    tar.addfile(tarinfo(name, "file", 0o644, mtime, size=size), f)


def git_revision():
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    rev = out.stdout.strip()
    return rev if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", rev) else None


def cargo_metadata():
    """Version, description, repository and licence from the workspace's Cargo.toml."""
    try:
        with open(os.path.join(REPO, "Cargo.toml"), "rb") as f:
            toml = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        fail(f"cannot read {REPO}/Cargo.toml ({e}); pass --version")
    ws = toml.get("workspace", {}).get("package", {})
    pkg = toml.get("package", {})
    return {
        "version": ws.get("version"),
        "description": pkg.get("description", ""),
        "source": ws.get("repository", ""),
        "licenses": ws.get("license", ""),
    }


def warn_old_glibc(interp):
    """Before glibc 2.34 the `files` and `dns` NSS backends were separate libnss_*.so modules,
    loaded with dlopen and so invisible to ldd; an image built on such a host could not resolve
    host names (e.g. a slurmrestd URL). Say so rather than guess which modules to add."""
    try:
        name, version = os.confstr("CS_GNU_LIBC_VERSION").split()
        major, minor = (int(x) for x in version.split(".")[:2])
    except (ValueError, OSError, AttributeError):
        return  # not glibc (or unknown): nothing to say
    if interp and name == "glibc" and (major, minor) < (2, 34):
        log(f"warning: this host has glibc {version}; name lookups in the image need libnss_files and "
            "libnss_dns, which ldd does not list. Build on glibc 2.34 or later (e.g. Debian 12).")


def source_date_epoch():
    value = os.environ.get("SOURCE_DATE_EPOCH", "0") or "0"
    if not value.isdigit():
        fail(f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds")
    return int(value)


def main(argv):
    ap = argparse.ArgumentParser(
        description="Build trainyard's OCI/docker-archive image tarball without a container engine.",
        epilog="SOURCE_DATE_EPOCH (default 0) sets every timestamp, for reproducible tarballs.",
    )
    ap.add_argument("--binary", required=True, help="the trainyard binary, e.g. target/release/trainyard")
    ap.add_argument("--out", required=True, help="the tarball to write, e.g. target/image/trainyard.tar")
    ap.add_argument("--tag", help="image name and tag (default trainyard:<version>)")
    ap.add_argument("--version", help="org.opencontainers.image.version (default: Cargo.toml's)")
    ap.add_argument("--revision", help="org.opencontainers.image.revision (default: git rev-parse HEAD)")
    args = ap.parse_args(argv)

    epoch = source_date_epoch()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    meta = cargo_metadata()
    version = args.version or meta["version"]
    if not version:
        fail("no version in Cargo.toml; pass --version")
    full_name, repo_tag, tag = normalize_tag(args.tag or f"trainyard:{version}")
    revision = args.revision if args.revision is not None else git_revision()

    binary = args.binary
    if not os.path.isfile(binary):
        fail(f"{binary}: no such file")
    arch, variant, interp = elf_info(binary)
    host = HOST_MACHINES.get(platform.machine())
    if arch != host:
        # The libraries are copied from this host, so they must match the binary's machine.
        fail(f"{binary} is built for {arch} but this host is {platform.machine()}; build the image on a {arch} host")
    if interp:
        libs = ldd_paths(binary)
        if interp not in libs:
            libs.append(interp)
    else:
        libs = []  # statically linked: nothing to copy
    log(f"{arch}, interpreter {interp or 'none (static)'}, libraries: {' '.join(libs) or 'none'}")
    warn_old_glibc(interp)
    ca = os.path.isfile(CA_BUNDLE)
    if not ca:
        log(f"{CA_BUNDLE} not found; the image gets no CA bundle")

    entries = layer_entries(binary, libs, ca)
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    # The work files live next to the output, so the final rename never crosses filesystems.
    with tempfile.TemporaryDirectory(prefix=".build-image-", dir=os.path.dirname(out)) as work:
        layer_file = os.path.join(work, "layer.tar.gz")
        log(f"writing the layer ({len(entries)} entries)")
        with open(layer_file, "wb") as f:
            diff_id, layer_digest, layer_size = write_layer(entries, epoch, f)

        labels = {
            "org.opencontainers.image.title": "trainyard",
            "org.opencontainers.image.description": meta["description"],
            "org.opencontainers.image.source": meta["source"],
            "org.opencontainers.image.licenses": meta["licenses"] or "Apache-2.0",
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.created": created,
        }
        if revision:
            labels["org.opencontainers.image.revision"] = revision
        env = [ENV_PATH]
        if ca:
            env.append(f"SSL_CERT_FILE={CA_BUNDLE}")
        config = {
            "architecture": arch,
            "os": "linux",
            "created": created,
            "config": {
                "User": f"{NONROOT}:{NONROOT}",
                "Entrypoint": ["/" + BINARY_PATH],
                "Env": env,
                "WorkingDir": "/home/nonroot",
                "Labels": labels,
            },
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [
                {
                    "created": created,
                    "created_by": "scripts/image/build.py: trainyard, its shared libraries (ldd), "
                    "passwd/group/nsswitch, CA bundle",
                    "comment": "built without a container engine",
                }
            ],
        }
        if variant:
            config["variant"] = variant
        config_bytes = canonical(config)
        config_desc = descriptor(MT_CONFIG, config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": MT_MANIFEST,
            "config": config_desc,
            "layers": [{"mediaType": MT_LAYER, "digest": layer_digest, "size": layer_size}],
        }
        manifest_bytes = canonical(manifest)
        manifest_desc = descriptor(MT_MANIFEST, manifest_bytes)
        platform_desc = {"architecture": arch, "os": "linux"}
        if variant:
            platform_desc["variant"] = variant
        index = {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [
                dict(
                    manifest_desc,
                    platform=platform_desc,
                    annotations={
                        "io.containerd.image.name": full_name,
                        "org.opencontainers.image.ref.name": tag,
                    },
                )
            ],
        }
        # docker-archive view of the same blobs, as `docker save` of Docker 25+ writes it.
        docker_manifest = [
            {
                "Config": blob_path(config_desc["digest"]),
                "RepoTags": [repo_tag],
                "Layers": [blob_path(layer_digest)],
            }
        ]

        tmp_out = os.path.join(work, "image.tar")
        log("writing the archive")
        write_archive(
            tmp_out,
            epoch,
            [
                ("oci-layout", canonical({"imageLayoutVersion": "1.0.0"})),
                ("index.json", canonical(index)),
                ("manifest.json", canonical(docker_manifest)),
                (blob_path(config_desc["digest"]), config_bytes),
                (blob_path(manifest_desc["digest"]), manifest_bytes),
                (blob_path(layer_digest), layer_file),
            ],
        )
        os.replace(tmp_out, out)

    log(f"{full_name}: layer {layer_size} bytes gzip'd, tarball {os.path.getsize(out)} bytes")
    print(manifest_desc["digest"])
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
