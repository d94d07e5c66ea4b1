#!/usr/bin/env bash
# Builds eventbus_<version>_<arch>.deb from this checkout: eventbusd and eventbus, the SDK library
# and the Swift runtime they need (so the machine needs no Swift toolchain to run them), the
# toolchain's crash reporter (swift-backtrace), the example modules, the SDK for module authors
# (prebuilt, and its sources), the systemd units, a default config (a conffile), man pages,
# shell completions and the documentation the README links.
#
#   packaging/deb/build-deb.sh [--configuration release|debug] [--products DIR] [--output DIR]
#
# It uses the products of `swift build -c CONFIGURATION` (and builds them if missing), or those
# already built in DIR. Needs dpkg-deb (dpkg), binutils (strip), patchelf and the Swift toolchain
# on PATH (its runtime libraries and swift-backtrace-static are bundled; SWIFT_BACKTRACE_STATIC
# names another swift-backtrace-static). `lintian --fail-on error,warning` passes on the result
# (with packaging/deb/lintian-overrides, which it ships).
#
# Version: the release `eventbus --version` prints (`eventbus 0.3.0 (control protocol 1)`) when
# HEAD is exactly at the tag v<release>; any other commit is a development build,
# <release>~git<YYYYMMDD>.<short hash> (the commit's date, UTC), which sorts before the release.
# Outside a git checkout: the release. Dates in the package are the commit's (SOURCE_DATE_EPOCH).
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
if [ ! -x "$products/eventbusd" ] || [ ! -x "$products/eventbus" ] || [ ! -x "$products/eventbus-module-worker" ] || [ ! -x "$products/eventbus-rule-runner" ]; then
  swift build -c "$configuration" --product eventbusd
  swift build -c "$configuration" --product eventbus-rule-runner
  swift build -c "$configuration" --product eventbus
  swift build -c "$configuration" --product eventbus-module-worker
  for module in Hello Follower RateSummary UnitAlerts; do swift build -c "$configuration" --product "$module"; done
fi
for tool in strip patchelf dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (bash .ci/setup installs it)" >&2; exit 1; }
done
# The toolchain's statically linked crash reporter: the Swift runtime of a crashing process runs
# it; eventbusd points its workers at the copy next to itself (SWIFT_BACKTRACE=…,swift-backtrace=).
swift_backtrace=${SWIFT_BACKTRACE_STATIC:-}
if [ -z "$swift_backtrace" ] && command -v swift >/dev/null; then
  swift_backtrace="$(dirname "$(readlink -f "$(command -v swift)")")/../libexec/swift/linux/swift-backtrace-static"
fi
[ -x "$swift_backtrace" ] || { echo "swift-backtrace-static not found (${swift_backtrace:-no swift on PATH}); set SWIFT_BACKTRACE_STATIC" >&2; exit 1; }

release=$("$products/eventbus" --version | cut -d' ' -f2)
case "$release" in
  [0-9]*) ;;
  *) echo "cannot read the release from \`eventbus --version\`: $("$products/eventbus" --version)" >&2; exit 1 ;;
esac
version=$release
commit=
if commit=$(git rev-parse --short=7 HEAD 2>/dev/null); then
  if ! git tag --points-at HEAD | grep -qxF "v$release"; then
    version="$release~git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d HEAD).$commit"
  fi
  export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(date +%s)}
# Who answers for the package (Maintainer:, the changelog's trailer); set EVENTBUS_MAINTAINER to a
# real address for a release (lintian refuses one at localhost).
maintainer=${EVENTBUS_MAINTAINER:-"EventBus developers <eventbus@example.org>"}
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
lib="$stage/usr/lib/eventbus"
doc="$stage/usr/share/doc/eventbus"
install -d "$lib/modules" "$stage/usr/bin" "$stage/etc/eventbus" "$stage/lib/systemd/system" \
  "$stage/usr/lib/sysusers.d" "$stage/usr/share/man/man1" "$stage/usr/share/man/man5" "$stage/usr/share/man/man8" \
  "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
  "$stage/usr/share/fish/vendor_completions.d" "$stage/usr/share/eventbus/EventBusKit" \
  "$stage/usr/share/lintian/overrides" "$doc" "$stage/DEBIAN"

# Binaries and libraries side by side: RUNPATH $ORIGIN finds libEventBusKit.so and the Swift
# runtime here, and $ORIGIN/.. the same from modules/. The toolchain's own folder, first in the
# RUNPATH SwiftPM writes, goes: on a machine with another Swift there, the binaries would load
# that runtime instead of the one they were built with.
# eventbus-module-worker runs process-isolated modules; eventbusd finds it next to itself.
# eventbus-rule-runner is root's helper that starts rules' units for eventbusd (its socket unit
# starts it; docs/rules-privileges.md).
install -m 0755 "$products/eventbusd" "$products/eventbus" "$products/eventbus-module-worker" "$products/eventbus-rule-runner" "$lib/"
install -m 0755 "$swift_backtrace" "$lib/swift-backtrace"
install -m 0644 "$products/libEventBusKit.so" "$lib/"
for module in Hello Follower RateSummary UnitAlerts; do install -m 0644 "$products/lib$module.so" "$lib/modules/"; done
for binary in "$lib/eventbusd" "$lib/eventbus" "$lib/eventbus-module-worker" "$lib/eventbus-rule-runner" "$lib/libEventBusKit.so" "$lib"/modules/*.so; do
  ldd "$binary" | awk '$3 ~ /^\/opt\/swift\// || $3 ~ /\/usr\/lib\/swift\// { print $3 }'
done | sort -u | while read -r runtime; do install -m 0644 "$runtime" "$lib/"; done
# Stripped of debug information and .comment. EventBus's own binaries, its SDK and the modules
# keep their symbol table: the Swift backtracer names a crashed worker's frames from it
# (`TailCommand.run() + 2517 in eventbus`, not `<unknown>`). Measured on the release build (before the rule runner joined them): the
# eight files take 20.7 MB with it against 13.2 MB without (+0.76 MB in the .deb, xz), where
# separate .debug files would add 15.6 MB (8.8 MB xz) in a -dbgsym package to be installed
# before a crash. The Swift runtime and the backtracer are stripped as dh_strip does (the
# dynamic symbol table stays). Swift's metadata (swift5_* sections: reflection, conformances,
# type descriptors) is allocated and loaded, so strip keeps it either way.
for object in "$lib"/eventbusd "$lib"/eventbus "$lib"/eventbus-module-worker "$lib"/eventbus-rule-runner "$lib"/libEventBusKit.so "$lib"/modules/*.so; do
  strip --remove-section=.comment --remove-section=.note --strip-debug "$object"
done
for object in "$lib"/swift-backtrace "$lib"/*.so; do
  [ "$object" = "$lib/libEventBusKit.so" ] && continue
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$object"
done
for object in "$lib"/eventbusd "$lib"/eventbus "$lib"/eventbus-module-worker "$lib"/eventbus-rule-runner "$lib"/*.so; do
  if [ -n "$(patchelf --print-rpath "$object")" ]; then patchelf --set-rpath '$ORIGIN' "$object"; fi
done
for object in "$lib"/modules/*.so; do patchelf --set-rpath '$ORIGIN/..' "$object"; done
# Depends: the Debian packages of every system library the binaries, modules and bundled runtime
# load (libsystemd0, libnats3.4, libc6, libstdc++6, …), found by dpkg rather than listed by hand.
depends=$(for binary in "$lib"/eventbusd "$lib"/eventbus "$lib"/eventbus-module-worker "$lib"/eventbus-rule-runner "$lib"/swift-backtrace "$lib"/*.so "$lib"/modules/*.so; do
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
# Rules drop-ins (docs/rules.md): the folder, empty; the examples are under the docs.
install -d -m 0755 "$stage/etc/eventbus/rules.d"
# Prometheus alert rules (with their promtool tests) and a Grafana dashboard for the metrics.
install -d "$stage/usr/share/eventbus/monitoring"
install -m 0644 packaging/monitoring/eventbus-alerts.yml packaging/monitoring/eventbus-alerts.test.yml \
  packaging/monitoring/eventbus-dashboard.json "$stage/usr/share/eventbus/monitoring/"
# The Python helper for exec modules (`eventbus module new --lang python` copies it from here).
install -d "$stage/usr/share/eventbus/python"
install -m 0644 examples/modules/eventbus_module.py "$stage/usr/share/eventbus/python/"
# The units as examples/ has them for a /usr/local install, pointed at where the package puts things.
for unit in eventbusd.service eventbusd.socket eventbus-rule-runner.socket eventbus-rule-runner@.service; do
  sed -e 's|/usr/local/bin/|/usr/bin/|g' -e 's|/usr/local/lib/|/usr/lib/|g' -e 's|/usr/local/share/doc/|/usr/share/doc/|g' "examples/$unit" > "$stage/lib/systemd/system/$unit"
  chmod 0644 "$stage/lib/systemd/system/$unit"
done
printf 'u eventbus - "EventBus host" /var/lib/eventbus /usr/sbin/nologin\nm eventbus systemd-journal\n' > "$stage/usr/lib/sysusers.d/eventbus.conf"

# Man pages: eventbusd(8), eventbus(1) and eventbus-COMMAND(1) for every subcommand, nested ones
# too (eventbus-module-new(1)), generated from the commands themselves by swift-argument-parser's
# generate-manual (the tool its generate-manual plugin runs; built from the package's own
# checkout, so it works offline): every option, argument and subcommand with its help, in mdoc.
# Each page gets EXAMPLES from packaging/deb/man-examples/PAGE when there is one, and SEE ALSO.
# Text that is not ASCII (em dashes, ×) becomes groff's \[uXXXX], which renders in any locale:
# the tool drops such characters, so it reads the commands' help through a filter that writes
# them as \[uXXXX] (which it then writes as \e[uXXXX], turned back below).
export LD_LIBRARY_PATH="$lib"
export LC_ALL=C.UTF-8
date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
man_escape() { perl -CSD -pe 's/([^\x00-\x7f])/sprintf("\\[u%04X]", ord($1))/ge'; }
generate_manual="$products/generate-manual"
if [ ! -x "$generate_manual" ]; then
  # A folder of its own: the package's .build may be locked by a `swift test` that runs this
  # script (the package tests do), and a second swift build on it would wait for ever.
  swift build -c "$configuration" --product generate-manual --scratch-path "$PWD/.build-manual"
  generate_manual="$(swift build -c "$configuration" --scratch-path "$PWD/.build-manual" --show-bin-path)/generate-manual"
fi
man_source=$(mktemp -d)
mkdir "$man_source/pages"
for command in eventbus eventbusd; do
  printf '#!/bin/sh\n"%s" --experimental-dump-help | perl -CSD -pe %s\n' "$lib/$command" \
    "'s/([^\\x00-\\x7f])/sprintf(\"\\\\\\\\[u%04X]\", ord(\$1))/ge'" > "$man_source/$command"
  chmod +x "$man_source/$command"
done
"$generate_manual" "$man_source/eventbus" --multi-page --section 1 --date "$date" --output-directory "$man_source/pages"
"$generate_manual" "$man_source/eventbusd" --section 8 --date "$date" --output-directory "$man_source/pages"
for page in "$man_source"/pages/*.[18]; do
  file=$(basename "$page")
  section=${file##*.}
  name=$(echo "${file%.*}" | tr . -)      # eventbus.module.new → eventbus-module-new
  [ "$name" = eventbus-help ] && continue  # `eventbus help COMMAND` is --help
  {
    # The tool's escapes turned back; the title, NAME (what whatis and lintian read) and the
    # subcommands' pages the root page lists named as the files are (eventbus-tail, not
    # eventbus.tail or "eventbus tail"), while SYNOPSIS keeps the command as it is typed.
    perl -pe 's/\\e\[u([0-9A-F]{4})\]/\\[u$1]/g;
      if (!$typed && /^\.Nm "(eventbus [^"]+)"$/) { $typed = $1; $_ = ".Nm " . ($1 =~ tr| |-|r) . "\n" }
      elsif ($typed && /^\.Nm$/) { $_ = ".Nm \"$typed\"\n" }
      s/^\.Dt .*/".Dt " . uc("'"$name"'") . " '"$section"'"/e;
      s/^(\.Xr )(eventbus\.[\w.-]+)/$1 . ($2 =~ tr|.|-|r)/e;
      $_ = "" if /^\.Xr eventbus-help /;
      $_ = ".Pp\n" if /^$/;  # a blank line of a discussion: a paragraph break in mdoc
      s/^(\.Xr [^,\n]*?)\n?$/$1 ,\n/ or s/\n?\z/\n/ if eof' "$page"  # more follow; a last newline
    if [ -f "packaging/deb/man-examples/$name" ]; then
      printf '.Sh EXAMPLES\n.Bd -literal -offset indent\n'
      # A backslash is groff's escape, a line's leading dot or quote a request: both kept literal.
      sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\&\\1/" "packaging/deb/man-examples/$name" | man_escape
      printf '.Ed\n'
    fi
    grep -q '^\.Sh "SEE ALSO"' "$page" || printf '.Sh "SEE ALSO"\n'
    for related in "eventbusd 8" "eventbus 1" "eventbus.yaml 5"; do
      [ "$related" = "$name $section" ] || printf '.Xr %s ,\n' "$related"
    done
    printf '.Pa /usr/share/doc/eventbus/README.md\nand the guides in\n.Pa /usr/share/doc/eventbus/docs/ .\n'
  } | gzip -9n > "$stage/usr/share/man/man$section/$name.$section.gz"
done
rm -rf "$man_source"
sed -e "s/@VERSION@/$release/g" -e "s/@DATE@/$date/g" packaging/deb/eventbus.yaml.5.in | man_escape | gzip -9n > "$stage/usr/share/man/man5/eventbus.yaml.5.gz"
# bash sources its completions: no #! line.
"$lib/eventbus" --generate-completion-script bash | sed '1{/^#!/d}' > "$stage/usr/share/bash-completion/completions/eventbus"
"$lib/eventbus" --generate-completion-script zsh > "$stage/usr/share/zsh/vendor-completions/_eventbus"
"$lib/eventbus" --generate-completion-script fish > "$stage/usr/share/fish/vendor_completions.d/eventbus.fish"
unset LD_LIBRARY_PATH

# Documentation: the README and everything it links, laid out as in the repository, so its links
# resolve in /usr/share/doc/eventbus: docs/, the example config and units (examples/), the example
# modules' READMEs (plugins/NAME/README.md, which link ../../docs/). PROTOCOL.md moves to docs/
# and the docs' links to it follow.
install -d "$doc/docs" "$doc/examples"
install -m 0644 CHANGELOG.md "$doc/"
sed 's|](Sources/ControlProtocol/PROTOCOL.md)|](docs/PROTOCOL.md)|g' README.md > "$doc/README.md"
for page in docs/*.md; do
  sed -e 's|](\.\./Sources/ControlProtocol/PROTOCOL.md)|](PROTOCOL.md)|g' \
      -e 's|](\.\./Sources/ControlProtocol/EXEC-PROTOCOL.md)|](EXEC-PROTOCOL.md)|g' "$page" > "$doc/$page"
done
install -m 0644 Sources/ControlProtocol/PROTOCOL.md "$doc/docs/PROTOCOL.md"
sed 's|](\.\./\.\./docs/|](|g' Sources/ControlProtocol/EXEC-PROTOCOL.md > "$doc/docs/EXEC-PROTOCOL.md"
install -d "$doc/examples/modules"
install -m 0644 examples/modules/* "$doc/examples/modules/"
install -m 0644 examples/eventbus.yaml examples/eventbusd.service examples/eventbusd.socket examples/eventbus-rule-runner.socket \
  examples/eventbus-rule-runner@.service "$doc/examples/"
install -d "$doc/examples/rules.d"
install -m 0644 examples/rules.d/*.yaml "$doc/examples/rules.d/"
for readme in plugins/*/README.md; do
  install -d "$doc/$(dirname "$readme")"
  install -m 0644 "$readme" "$doc/$readme"
  if [ -f "$(dirname "$readme")/sample.yaml" ]; then install -m 0644 "$(dirname "$readme")/sample.yaml" "$doc/$(dirname "$readme")/"; fi
done
install -m 0644 packaging/deb/copyright "$doc/copyright"
# The package is native (its version has no Debian revision), so its one changelog is changelog.gz.
{
  echo "eventbus ($version) unstable; urgency=medium"
  echo
  if [ "$version" = "$release" ]; then
    echo "  * Release $release."
  else
    echo "  * Development build of commit $commit, after release $release."
  fi
  echo
  echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n > "$doc/changelog.gz"
install -m 0644 packaging/deb/lintian-overrides "$stage/usr/share/lintian/overrides/eventbus"

install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$stage/DEBIAN/"
echo /etc/eventbus/eventbus.yaml > "$stage/DEBIAN/conffiles"
find "$stage" -path "$stage/DEBIAN" -prune -o -type d -exec chmod 0755 {} +
find "$stage" -path "$stage/DEBIAN" -prune -o -type f ! -perm /0111 -exec chmod 0644 {} +
find "$stage" -path "$stage/DEBIAN" -prune -o -type f -perm /0111 -exec chmod 0755 {} +
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/md5sums" "$stage/DEBIAN/conffiles"
cat > "$stage/DEBIAN/control" <<CONTROL
Package: eventbus
Version: $version
Architecture: $arch
Maintainer: $maintainer
Depends: $depends, passwd
Section: admin
Priority: optional
Installed-Size: $(du -sk --apparent-size --exclude=DEBIAN "$stage" | cut -f1)
Description: plugin-based event bus for Linux services
 eventbusd publishes timers, file changes (inotify), journal lines and posted
 events as shared Combine streams to handler modules (Swift shared objects);
 eventbus tails, posts and shows status. Includes the Swift runtime it needs
 and the EventBusKit SDK sources for building modules (which needs Swift 6.3).
CONTROL
mkdir -p "$output"
package="$output/eventbus_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$package" >/dev/null
echo "$package"
