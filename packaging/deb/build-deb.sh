#!/usr/bin/env bash
# Builds eventbus_<version>_<arch>.deb from this checkout: eventbusd and eventbus, the SDK library
# and the Swift runtime they need (so the machine needs no Swift toolchain to run them), the
# example modules, the SDK for module authors (prebuilt, and its sources), the systemd units, a default config
# (a conffile), man pages and shell completions.
#
#   packaging/deb/build-deb.sh [--configuration release|debug] [--products DIR] [--output DIR]
#
# It uses the products of `swift build -c CONFIGURATION` (and builds them if missing), or those
# already built in DIR. Needs dpkg-deb (dpkg) and help2man.
set -euo pipefail
cd "$(dirname "$0")/../.."
configuration=release
products=
output=.
while [ $# -gt 0 ]; do
  case "$1" in
    --configuration) configuration="$2"; shift 2 ;;
    --products) products="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    *) echo "usage: $0 [--configuration release|debug] [--products DIR] [--output DIR]" >&2; exit 64 ;;
  esac
done
if [ -z "$products" ]; then products=$(swift build -c "$configuration" --show-bin-path); fi
if [ ! -x "$products/eventbusd" ] || [ ! -x "$products/eventbus" ] || [ ! -x "$products/eventbus-module-worker" ]; then
  swift build -c "$configuration" --product eventbusd
  swift build -c "$configuration" --product eventbus
  swift build -c "$configuration" --product eventbus-module-worker
  for module in Hello Follower RateSummary; do swift build -c "$configuration" --product "$module"; done
fi
command -v help2man >/dev/null || { echo "help2man is missing (apt-get install help2man)" >&2; exit 1; }

version=$("$products/eventbus" --version | cut -d' ' -f1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
lib="$stage/usr/lib/eventbus"
install -d "$lib/modules" "$stage/usr/bin" "$stage/etc/eventbus" "$stage/lib/systemd/system" \
  "$stage/usr/lib/sysusers.d" "$stage/usr/share/man/man1" "$stage/usr/share/man/man8" \
  "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
  "$stage/usr/share/fish/vendor_completions.d" "$stage/usr/share/eventbus/EventBusKit" \
  "$stage/usr/share/doc/eventbus" "$stage/DEBIAN"

# Binaries and libraries side by side: RUNPATH $ORIGIN finds libEventBusKit.so and the Swift
# runtime here (the toolchain's own folder, first in RUNPATH, is absent on a plain machine).
# eventbus-module-worker runs process-isolated modules; eventbusd finds it next to itself.
install -m 0755 "$products/eventbusd" "$products/eventbus" "$products/eventbus-module-worker" "$lib/"
install -m 0644 "$products/libEventBusKit.so" "$lib/"
for module in Hello Follower RateSummary; do install -m 0644 "$products/lib$module.so" "$lib/modules/"; done
for binary in "$lib/eventbusd" "$lib/eventbus" "$lib/eventbus-module-worker" "$lib/libEventBusKit.so" "$lib"/modules/*.so; do
  ldd "$binary" | awk '$3 ~ /^\/opt\/swift\// || $3 ~ /\/usr\/lib\/swift\// { print $3 }'
done | sort -u | while read -r runtime; do install -m 0644 "$runtime" "$lib/"; done
# Depends: the Debian packages of every system library the binaries, modules and bundled runtime
# load (libsystemd0, libnats3.4, libc6, libstdc++6, …), found by dpkg rather than listed by hand.
depends=$(for binary in "$lib"/eventbusd "$lib"/eventbus "$lib"/eventbus-module-worker "$lib"/*.so "$lib"/modules/*.so; do
  ldd "$binary" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -v -e "^$stage/" -e '^/opt/swift/' | while read -r library; do
  real=$(readlink -f "$library")
  for candidate in "$library" "$real" "${library#/usr}" "${real#/usr}" "/usr$library" "/usr$real"; do
    owner=$(dpkg -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$owner" ] && { echo "$owner"; break; }
  done
done | sort -u | paste -sd, - | sed 's/,/, /g')
[ -n "$depends" ] || { echo "could not find the packages of the libraries eventbusd needs" >&2; exit 1; }
ln -s ../lib/eventbus/eventbusd "$stage/usr/bin/eventbusd"
ln -s ../lib/eventbus/eventbus "$stage/usr/bin/eventbus"

# The SDK sources: `eventbus module sdk-path` finds them here for `eventbus module new --from-source`.
tar -C plugins/EventBusKit --exclude .build --exclude .swiftpm -cf - . | tar -C "$stage/usr/share/eventbus/EventBusKit" -xf -
# The prebuilt SDK, what `eventbus module new` builds against (seconds instead of a minute): the
# compiled modules of EventBusKit and the OpenCombine modules it re-exports, and the module map of
# OpenCombine's C helpers with its header; modules link the libEventBusKit.so installed above.
install -d "$lib/sdk/Modules" "$lib/sdk/include/COpenCombineHelpers"
for module in EventBusKit OpenCombine OpenCombineDispatch; do
  install -m 0644 "$products/Modules/$module.swiftmodule" "$lib/sdk/Modules/"
done
helpers=$(sed -n 's/.*umbrella header "\(.*\)".*/\1/p' "$products/COpenCombineHelpers.build/module.modulemap")
install -m 0644 "$helpers" "$lib/sdk/include/COpenCombineHelpers/"
printf 'module COpenCombineHelpers {\n    umbrella header "%s"\n    export *\n}\n' "$(basename "$helpers")" \
  > "$lib/sdk/include/COpenCombineHelpers/module.modulemap"

install -m 0644 packaging/deb/eventbus.yaml "$stage/etc/eventbus/eventbus.yaml"
sed 's|/usr/local/bin/|/usr/bin/|g' examples/eventbusd.service > "$stage/lib/systemd/system/eventbusd.service"
install -m 0644 examples/eventbusd.socket "$stage/lib/systemd/system/eventbusd.socket"
chmod 0644 "$stage/lib/systemd/system/eventbusd.service"
printf 'u eventbus - "EventBus host" /var/lib/eventbus /usr/sbin/nologin\nm eventbus systemd-journal\n' > "$stage/usr/lib/sysusers.d/eventbus.conf"

# Man pages from each command's own --help, and completions from swift-argument-parser.
export LD_LIBRARY_PATH="$lib"
help2man --no-info --section 8 --name "the EventBus host daemon" "$lib/eventbusd" | gzip -9n > "$stage/usr/share/man/man8/eventbusd.8.gz"
help2man --no-info --section 1 --name "tail, post and inspect the EventBus host" "$lib/eventbus" | gzip -9n > "$stage/usr/share/man/man1/eventbus.1.gz"
for command in tail post status modules module; do
  wrapper="$stage/eventbus-$command"
  printf '#!/bin/sh\nif [ "$1" = --version ]; then exec "%s" --version; fi\nexec "%s" %s "$@"\n' "$lib/eventbus" "$lib/eventbus" "$command" > "$wrapper"
  chmod +x "$wrapper"
  help2man --no-info --section 1 --name "eventbus $command" "$wrapper" | gzip -9n > "$stage/usr/share/man/man1/eventbus-$command.1.gz"
  rm "$wrapper"
done
"$lib/eventbus" --generate-completion-script bash > "$stage/usr/share/bash-completion/completions/eventbus"
"$lib/eventbus" --generate-completion-script zsh > "$stage/usr/share/zsh/vendor-completions/_eventbus"
"$lib/eventbus" --generate-completion-script fish > "$stage/usr/share/fish/vendor_completions.d/eventbus.fish"
unset LD_LIBRARY_PATH

install -m 0644 README.md "$stage/usr/share/doc/eventbus/README.md"
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$stage/DEBIAN/"
echo /etc/eventbus/eventbus.yaml > "$stage/DEBIAN/conffiles"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: eventbus
Version: $version
Architecture: $arch
Maintainer: EventBus developers <eventbus@localhost>
Depends: $depends, passwd
Section: admin
Priority: optional
Installed-Size: $(du -sk "$stage" | cut -f1)
Description: plugin-based event bus for Linux services
 eventbusd publishes timers, file changes (inotify), journal lines and posted
 events as shared Combine streams to handler modules (Swift shared objects);
 eventbus tails, posts and shows status. Includes the Swift runtime it needs
 and the EventBusKit SDK sources for building modules (which needs Swift 6.3).
CONTROL
find "$stage" -path "$stage/DEBIAN" -prune -o -type d -exec chmod 0755 {} +
mkdir -p "$output"
package="$output/eventbus_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$package" >/dev/null
echo "$package"
