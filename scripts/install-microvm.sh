#!/usr/bin/env bash
# Installs what micro-VM actors need on this machine, from Debian's packages
# at pinned versions: QEMU (qemu-system-x86), and a guest kernel with the
# modules the guest agent loads plus a static busybox, unpacked into
# $PREFIX/share/stasis/microvm (default /usr/local):
#
#   vmlinuz        the guest kernel (Debian's cloud flavour: small, virtio)
#   modules/       its module tree (lib/modules/RELEASE), trimmed to MODULES
#   modules.load   MODULES, in load order, for stasis-agent initramfs
#   busybox        a static busybox for the guest's shell tools
#
# Idempotent: a second run with the same versions does nothing.
set -euo pipefail

QEMU_VERSION="${QEMU_VERSION:-1:7.2+dfsg-7+deb12u18+b3}"
KERNEL_PACKAGE="${KERNEL_PACKAGE:-linux-image-6.1.0-50-cloud-amd64}"
KERNEL_VERSION="${KERNEL_VERSION:-6.1.176-1}"
BUSYBOX_VERSION="${BUSYBOX_VERSION:-1:1.35.0-4+deb12u1+b1}"
# The guest's drivers: virtio PCI, the agent's virtio-serial port, and
# virtio-rng (the stand-in device the tests detach and attach).
MODULES=(
	kernel/drivers/virtio/virtio.ko
	kernel/drivers/virtio/virtio_ring.ko
	kernel/drivers/virtio/virtio_pci_modern_dev.ko
	kernel/drivers/virtio/virtio_pci_legacy_dev.ko
	kernel/drivers/virtio/virtio_pci.ko
	kernel/drivers/char/virtio_console.ko
	kernel/drivers/char/hw_random/virtio-rng.ko
)

prefix="${PREFIX:-/usr/local}"
dest="$prefix/share/stasis/microvm"
stamp="$dest/versions"
want="qemu=$QEMU_VERSION kernel=$KERNEL_PACKAGE=$KERNEL_VERSION busybox=$BUSYBOX_VERSION"

if [[ $(id -u) -ne 0 ]]; then
	echo "install-microvm: installing Debian packages needs root (run with sudo)" >&2
	exit 1
fi
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && command -v qemu-system-x86_64 >/dev/null; then
	echo "micro-VM parts already installed in $dest ($want)"
	exit 0
fi

apt-get update -qq
echo "installing qemu-system-x86 $QEMU_VERSION"
if ! dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null | grep -qxF "$QEMU_VERSION"; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "qemu-system-x86=$QEMU_VERSION" >/dev/null
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "fetching $KERNEL_PACKAGE $KERNEL_VERSION and busybox-static $BUSYBOX_VERSION"
(cd "$work" && apt-get download -qq "$KERNEL_PACKAGE=$KERNEL_VERSION" "busybox-static=$BUSYBOX_VERSION" 2>/dev/null) || {
	echo "install-microvm: apt-get download failed; run apt-get update, and if Debian has dropped a pinned version, bump it at the top of this script" >&2
	exit 1
}
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/root"; done

release="${KERNEL_PACKAGE#linux-image-}"
rm -rf "$dest.new"
mkdir -p "$dest.new/modules"
install -m 0644 "$work/root/boot/vmlinuz-$release" "$dest.new/vmlinuz"
install -m 0755 "$work/root/bin/busybox" "$dest.new/busybox"
for m in "${MODULES[@]}"; do
	install -D -m 0644 "$work/root/lib/modules/$release/$m" "$dest.new/modules/$m"
	echo "$m" >>"$dest.new/modules.load"
done
echo "$want" >"$dest.new/versions"
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "installed micro-VM parts in $dest"
