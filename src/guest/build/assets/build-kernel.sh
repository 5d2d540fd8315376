#!/bin/bash
# Build the guest kernel: tinyconfig + our fragment, from Debian's linux-source-6.1.
# usage: build-kernel.sh <fragment> <out-dir> <jobs>   (out-dir must not exist; written atomically by the caller)
set -euo pipefail
FRAGMENT=$1 OUT=$2 JOBS=${3:-2}
SRC_TAR=/usr/src/linux-source-6.1.tar.xz
[ -f "$SRC_TAR" ] || { echo "missing $SRC_TAR (apt-get install linux-source-6.1)" >&2; exit 3; }
mkdir -p "$OUT"
cd "$OUT"
echo "step: extract $SRC_TAR"
tar xf "$SRC_TAR"
cd linux-source-6.1
# Our one source change: a boot parameter that presets the local APIC timer period (APIC bus clocks per tick).
# Without it the kernel calibrates that timer against the PIT and then verifies it, ~0.26 s of a ~1.8 s boot under
# TCG, where QEMU's APIC bus runs at a fixed 1 GHz (the host passes lapic_timer_period=1000000000/HZ).
cat >> arch/x86/kernel/apic/apic.c <<'PATCH'

static int __init sbx_lapic_timer_period(char *arg)
{
	return kstrtouint(arg, 0, &lapic_timer_period);
}
early_param("lapic_timer_period", sbx_lapic_timer_period);
PATCH
echo "step: configure (tinyconfig + fragment)"
make -s tinyconfig >/dev/null
grep -v '^#' "$FRAGMENT" | sed 's/[[:space:]]*#.*$//' | grep . > ../fragment.clean
./scripts/kconfig/merge_config.sh -m .config ../fragment.clean >/dev/null
make -s olddefconfig >/dev/null
# Every option we asked for must have survived olddefconfig (a silent drop is a broken guest).
missing=0
while IFS= read -r line; do
  opt=${line%%=*}; val=${line#*=}
  if [ "$val" = n ]; then
    if grep -q "^$opt=" .config; then echo "config: $opt should be unset" >&2; missing=1; fi
  elif ! grep -qx "$opt=$val" .config; then
    echo "config: $opt=$val did not survive olddefconfig" >&2; missing=1
  fi
done < ../fragment.clean
[ $missing = 0 ] || exit 4
echo "step: compile vmlinux (make -j$JOBS)"
nice -n 10 make -j"$JOBS" vmlinux 2>&1 | awk '/ (CC|LD|AR) /{n++; if (n%200==0) print "progress: " n " objects"} /error|Error/{print}'
[ "${PIPESTATUS[0]}" = 0 ] || exit 5
cp vmlinux ../vmlinux
cp .config ../config
cd ..
rm -rf linux-source-6.1 fragment.clean
echo "step: done"
