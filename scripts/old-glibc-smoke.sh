#!/usr/bin/env bash
# Runs the wheel smoke suite against the abi3 wheel in dist/ on glibc 2.27: an Ubuntu 18.04
# (bionic) root file system made with debootstrap, and a CPython 3.11 compiled inside it from
# Debian's source package of python3.11 (bionic itself has no Python 3.9+). Needs root (chroot,
# mounts), debootstrap (apt-get install debootstrap) and access to archive.ubuntu.com and
# deb.debian.org; about 10 minutes the first time (mostly compiling Python), seconds afterwards.
# The root file system stays in $ROOTFS (default /tmp/framebus-bionic) for the next run.
#
#   sudo bash scripts/old-glibc-smoke.sh [WHEEL]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOTFS=${ROOTFS:-/tmp/framebus-bionic}
wheel=${1:-$(ls dist/framebus-*-abi3-manylinux*_x86_64*.whl | head -1)}
[ -f "$wheel" ] || { echo "old-glibc-smoke.sh: no abi3 wheel (run scripts/build-wheels.sh --abi3)" >&2; exit 1; }
PY_ORIG=python3.11_3.11.2.orig.tar.gz
PY_SHA256=2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849

if [ ! -x "$ROOTFS/usr/bin/gcc" ]; then
  # Ubuntu's archive key is not in Debian's keyrings; the file system is a throwaway test bed.
  debootstrap --variant=minbase --no-check-gpg \
    --include=build-essential,zlib1g-dev,libffi-dev,libbz2-dev,liblzma-dev \
    bionic "$ROOTFS" http://archive.ubuntu.com/ubuntu
fi
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" || true; done; }
trap cleanup EXIT
for m in proc sys dev; do
  if ! mountpoint -q "$ROOTFS/$m"; then
    if [ "$m" = proc ]; then mount -t proc proc "$ROOTFS/proc"; else mount --bind "/$m" "$ROOTFS/$m"; fi
    mounted=("$ROOTFS/$m" "${mounted[@]}")
  fi
done
if [ ! -x "$ROOTFS/opt/py311/bin/python3.11" ]; then
  # /dev must be mounted while configure runs, or it decides sem_open does not work.
  curl -fsS -o "$ROOTFS/root/$PY_ORIG" "http://deb.debian.org/debian/pool/main/p/python3.11/$PY_ORIG"
  echo "$PY_SHA256  $ROOTFS/root/$PY_ORIG" | sha256sum -c -
  chroot "$ROOTFS" bash -ec "cd /root && tar xzf $PY_ORIG && cd Python-3.11.2 &&
    ./configure -q --prefix=/opt/py311 --without-ensurepip && make -j\$(nproc) -s && make -s install"
fi
# No network inside: pip, numpy and the smoke suite's extras come as wheels from here.
rm -rf "$ROOTFS/root/wh" && mkdir -p "$ROOTFS/root/wh" "$ROOTFS/root/tests"
python3 -m pip download -q --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.11 \
  --implementation cp -d "$ROOTFS/root/wh" pip "numpy<2.3" "rich>=13" "imageio-ffmpeg>=0.5"
cp "$wheel" "$ROOTFS/root/wh/"
cp tests/wheel_smoke.py "$ROOTFS/root/tests/"
chroot "$ROOTFS" env -i HOME=/root PATH=/usr/bin:/bin bash -ec '
  cd /root && ldd --version | head -1
  rm -rf v && /opt/py311/bin/python3.11 -m venv --without-pip v
  v/bin/python "$(ls wh/pip-*.whl)/pip" install -q --no-index --find-links wh wh/framebus-*.whl rich imageio-ffmpeg
  env PATH=/root/v/bin:/usr/bin:/bin v/bin/python tests/wheel_smoke.py'
