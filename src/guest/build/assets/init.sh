#!/bin/busybox sh
# sandbox-operator guest /init (initramfs). Mounts the basics, optionally stacks a read-only root
# filesystem (virtio-blk) under a tmpfs copy-on-write layer, sets up networking, then hands PID 1 to
# the agent. Kernel cmdline: sbx.root=/dev/vda sbx.rootfstype=ext4 sbx.net=1
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777,size=64m shm /dev/shm
ROOT= FSTYPE=ext4 NET=
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    sbx.root=*) ROOT=${arg#sbx.root=} ;;
    sbx.rootfstype=*) FSTYPE=${arg#sbx.rootfstype=} ;;
    sbx.net=*) NET=${arg#sbx.net=} ;;
  esac
done
ip link set lo up
# The agent has no CPU-bound goroutines; async preemption only adds signals to handle, which under TCG
# (every code path translated afresh in each clone) cost more than they save.
export GODEBUG=asyncpreemptoff=1
if [ "$NET" = 1 ]; then
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
fi
if [ -n "$ROOT" ]; then
  mkdir -p /lower /rw /newroot
  if ! mount -t "$FSTYPE" -o ro "$ROOT" /lower; then
    echo "SBX_INIT_ERROR cannot mount root $ROOT" > /dev/ttyS0
    exec /sbin/sandbox-agent
  fi
  mount -t tmpfs -o mode=755 rw /rw
  mkdir -p /rw/upper /rw/work
  mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot
  mkdir -p /newroot/.sbx /newroot/proc /newroot/sys /newroot/dev /newroot/tmp /newroot/etc /newroot/root
  chmod 1777 /newroot/tmp
  mount -t tmpfs -o mode=755,size=16m sbx /newroot/.sbx
  cp /sbin/sandbox-agent /bin/busybox /newroot/.sbx/
  # The copy-on-write layer stays reachable for the agent (its layer.save: a filesystem-only pause, agent/upper.go);
  # after switch_root nothing else could reach it.
  mkdir /newroot/.sbx/rw
  mount --move /rw /newroot/.sbx/rw
  [ "$NET" = 1 ] && echo "nameserver 10.0.2.3" > /newroot/etc/resolv.conf
  mount --move /proc /newroot/proc
  mount --move /sys /newroot/sys
  mount --move /dev /newroot/dev
  exec switch_root /newroot /.sbx/sandbox-agent
fi
[ "$NET" = 1 ] && echo "nameserver 10.0.2.3" > /etc/resolv.conf
exec /sbin/sandbox-agent
