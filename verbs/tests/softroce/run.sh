#!/usr/bin/env bash
# Run evd-verbs' real-verbs tests on Soft-RoCE inside a throwaway qemu guest.
#
#   verbs/tests/softroce/run.sh [BINARY...]
#   verbs/tests/softroce/run.sh --kernel-only   (fetch and unpack the guest
#                                                kernel only, for a later run)
#   verbs/tests/softroce/run.sh --build-only    (build the default binaries
#                                                only and print their paths)
#
# Builds a small guest from Debian packages (Debian's kernel with rdma_rxe,
# rdma-core userspace from the host, busybox), boots it under qemu (TCG, no
# network device at all), creates rxe0 on a dummy netdev, runs each host-built
# BINARY inside (default: the softroce test binary and the rc_pingpong
# example, built here if missing), and exits with the guest's status: 0 only
# if every binary passed. The guest kernel is downloaded and unpacked into
# verbs/tests/softroce/work/ (gitignored); nothing is installed on the host
# except the Debian packages listed in scripts/packages.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
work="$here/work"
mkdir -p "$work"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
timeout_s=${SOFTROCE_TIMEOUT:-300}

log() { echo "softroce: $*" >&2; }

# --- the binaries ------------------------------------------------------------
mode=run
case "${1:-}" in
    --kernel-only) mode=kernel; shift ;;
    --build-only) mode=build; shift ;;
esac
bins=("$@")
# The two-process rdma_cm ping-pong (server and client), run by the guest's
# own script below: the default build's, or SOFTROCE_TWO_PROCESS.
two_process="${SOFTROCE_TWO_PROCESS:-}"
if [ "$mode" = kernel ]; then
    : # only the guest kernel below (fetched, unpacked), for a later run
elif [ ${#bins[@]} -eq 0 ]; then
    test_bin=$(cd "$repo" && ./scripts/executables --release -p evd-verbs --features ibverbs \
        --test softroce | awk '$1 == "test" && $3 == "softroce" {print $5}')
    [ -n "$test_bin" ] || { log "could not build the softroce test binary"; exit 1; }
    (cd "$repo" && cargo build --release -p evd-verbs --features ibverbs --example rc_pingpong \
        --example cm_pingpong)
    bins=("$test_bin" "$CARGO_TARGET_DIR/release/examples/rc_pingpong")
    two_process="$CARGO_TARGET_DIR/release/examples/cm_pingpong"
fi
if [ "$mode" = build ]; then
    # The default binaries, then the two-process one, a line each: run them
    # later with SOFTROCE_TWO_PROCESS=<last line> run.sh <the others>.
    printf '%s\n' "${bins[@]}" "$two_process"
    exit 0
fi

# --- the guest kernel (Debian's, unpacked, never installed) -------------------
kernel_package() { # the linux-image package linux-image-amd64 depends on, or nothing
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}' || true
}
download() { (cd "$work" && rm -f "$1"_*.deb && apt-get download "$1" >/dev/null); }
kpkg=$(kernel_package)
if [ -z "$kpkg" ] || [ ! -f "$work/kernel-${kpkg#linux-image-}/.unpacked" ]; then
    if [ -z "$kpkg" ] || ! download "$kpkg"; then
        # The package lists are missing or older than the mirror (a fresh
        # machine): read them again (as root), then download.
        log "reading the package lists again (apt-get update)"
        apt-get update -qq
        kpkg=$(kernel_package)
        [ -n "$kpkg" ] || { log "no linux-image package found"; exit 1; }
        download "$kpkg"
    fi
fi
kver=${kpkg#linux-image-}
kroot="$work/kernel-$kver"
if [ ! -f "$kroot/.unpacked" ]; then
    log "unpacking $kpkg"
    rm -rf "$kroot" && mkdir -p "$kroot"
    dpkg -x "$work/${kpkg}"_*.deb "$kroot"
    depmod -b "$kroot" "$kver"
    touch "$kroot/.unpacked"
fi
vmlinuz="$kroot/boot/vmlinuz-$kver"
vmlinux="$work/vmlinux-$kver"
if [ ! -f "$vmlinux" ]; then
    # The uncompressed ELF boots about twice as fast under TCG (PVH entry):
    # find the xz payload in the bzImage and unpack it.
    python3 - "$vmlinuz" "$vmlinux" <<'PY'
import lzma, sys
data = open(sys.argv[1], 'rb').read()
magic = b'\xfd7zXZ\x00'
pos = data.find(magic)
while pos >= 0:
    try:
        out = lzma.LZMADecompressor().decompress(data[pos:])
        if out[:4] == b'\x7fELF':
            open(sys.argv[2], 'wb').write(out)
            sys.exit(0)
    except lzma.LZMAError:
        pass
    pos = data.find(magic, pos + 1)
sys.exit("no ELF payload in " + sys.argv[1])
PY
fi

if [ "$mode" = kernel ]; then
    log "guest kernel $kver ready"
    exit 0
fi

# --- the initramfs -----------------------------------------------------------
root="$work/root"
rm -rf "$root"
# Merged /usr as on the host, so the paths ldd prints resolve either way.
mkdir -p "$root"/{etc,proc,sys,dev,tmp,run,tests} \
    "$root"/usr/{bin,sbin,lib,lib64} "$root"/usr/lib/modules \
    "$root"/usr/lib/x86_64-linux-gnu/libibverbs "$root"/etc/libibverbs.d
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
cp /bin/busybox "$root/usr/bin/busybox"
for applet in sh mount mkdir echo cat poweroff sleep ls dmesg insmod grep; do
    ln -sf busybox "$root/usr/bin/$applet"
done
copy_with_libs() {
    local f=$1 dest=$2
    cp -L "$f" "$root$dest"
    ldd "$f" 2>/dev/null | awk '/=>/ {print $3} /^[[:space:]]*\// {print $1}' | while read -r lib; do
        [ -n "$lib" ] && [ -f "$lib" ] || continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}
copy_with_libs /usr/bin/ip /usr/bin/ip
copy_with_libs /usr/bin/rdma /usr/bin/rdma
copy_with_libs /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
# rdma-mummy-sys loads libibverbs and librdmacm at run time (dlopen), so
# ldd of the test binaries does not list them.
for lib in libibverbs.so.1 librdmacm.so.1; do
    copy_with_libs "/usr/lib/x86_64-linux-gnu/$lib" "/usr/lib/x86_64-linux-gnu/$lib"
done
cp /etc/libibverbs.d/rxe.driver "$root/etc/libibverbs.d/"
if [ -n "${two_process:-}" ]; then
    copy_with_libs "$two_process" /tests/cm_pingpong
fi
i=0
names=()
for b in "${bins[@]}"; do
    name="t$i-$(basename "$b")"
    copy_with_libs "$b" "/tests/$name"
    names+=("$name")
    i=$((i + 1))
done
# Modules in load order (each after those it needs): decompress if the package ships them
# compressed, since busybox insmod takes plain .ko files.
# ib_cm .. rdma_ucm: the connection manager (/dev/infiniband/rdma_cm).
modules="udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe crc32_generic configfs ib_cm iw_cm rdma_cm rdma_ucm dummy"
: > "$root/modules.list"
for m in $modules; do
    for ko in $(modprobe -d "$kroot" -S "$kver" --show-depends "$m" | awk '/^insmod/ {print $2}'); do
        base=$(basename "$ko"); base=${base%.xz}; base=${base%.zst}
        [ -f "$root/lib/modules/$base" ] && continue
        case "$ko" in
            *.xz) xz -dc "$ko" > "$root/lib/modules/$base" ;;
            *.zst) zstd -qdc "$ko" > "$root/lib/modules/$base" ;;
            *) cp "$ko" "$root/lib/modules/$base" ;;
        esac
        opts=""
        [ "$base" = dummy.ko ] && opts="numdummies=0"
        echo "$base $opts" >> "$root/modules.list"
    done
done
cat > "$root/init" <<INIT
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /tmp
while read -r ko opts; do
    insmod /lib/modules/\$ko \$opts || echo "insmod \$ko failed"
done < /modules.list
/usr/bin/ip link add dummy0 type dummy
/usr/bin/ip link set dummy0 up
# rdma_cm resolves IP addresses: the tests connect to this one.
/usr/bin/ip addr add 10.0.0.1/24 dev dummy0
/usr/bin/rdma link add rxe0 type rxe netdev dummy0 || echo "rdma link add failed"
rc=0
for t in ${names[*]}; do
    echo "=== guest: running \$t"
    /tests/\$t
    r=\$?
    echo "=== guest: \$t exited \$r"
    [ \$r -eq 0 ] || rc=\$r
done
# The rdma_cm ping-pong between two processes, in each mode: the server
# must be listening before the client connects (it prints "listening").
# Waited for as long as the server lives, not for a fixed time: under TCG on
# a busy host its start can take tens of seconds, and a client that
# connects first is rejected (no listener: status 8).
if [ -x /tests/cm_pingpong ]; then
    for mode in event adaptive busy; do
        echo "=== guest: cm_pingpong (\$mode), two processes"
        /tests/cm_pingpong server --addr 10.0.0.1 --mode \$mode > /tmp/server.log 2>&1 &
        server=\$!
        until grep -q listening /tmp/server.log || ! kill -0 \$server 2>/dev/null; do sleep 0.1; done
        /tests/cm_pingpong client --addr 10.0.0.1 --size 64 --iters 2000 --mode \$mode
        c=\$?
        # The server waits for a connect request as long as it takes: a
        # client that failed before making one leaves it waiting.
        [ \$c -eq 0 ] || kill \$server 2>/dev/null
        wait \$server
        s=\$?
        cat /tmp/server.log
        echo "=== guest: cm_pingpong (\$mode) client exited \$c, server exited \$s"
        [ \$c -eq 0 ] || rc=\$c
        [ \$s -eq 0 ] || rc=\$s
    done
fi
# Last, as it removes the device: a listener hears DEVICE_REMOVAL.
set -- ${names[*]}
echo "=== guest: device removal"
/tests/\$1 device-removal > /tmp/removal.log 2>&1 &
listener=\$!
until grep -q listening /tmp/removal.log || ! kill -0 \$listener 2>/dev/null; do sleep 0.1; done
/usr/bin/rdma link delete rxe0 || echo "rdma link delete failed"
wait \$listener
r=\$?
cat /tmp/removal.log
echo "=== guest: device removal exited \$r"
[ \$r -eq 0 ] || rc=\$r
echo "GUEST_EXIT=\$rc"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initramfs.gz"

# --- boot ---------------------------------------------------------------------
log "booting $kver under qemu (TCG, no network)"
out="$work/console.log"
set +e
timeout "$timeout_s" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu max -smp 2 -m 1024 \
    -nodefaults -nic none -no-reboot -display none -serial stdio -monitor none \
    -kernel "$vmlinux" -initrd "$work/initramfs.gz" \
    -append "console=ttyS0 panic=-1 loglevel=4 rdinit=/init" < /dev/null | tee "$out"
qrc=${PIPESTATUS[0]}
set -e
rc=$(tr -d '\r' < "$out" | sed -n 's/^GUEST_EXIT=\([0-9]*\).*/\1/p' | tail -1)
if [ -z "$rc" ]; then
    log "the guest never reported a status (qemu exit $qrc)"
    exit 1
fi
log "guest status $rc"
exit "$rc"
