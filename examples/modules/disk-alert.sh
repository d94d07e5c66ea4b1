#!/bin/bash
# An EventBus exec module in bash, with no helper (docs/modules-any-language.md): posts
# disk.alert for each user.disk.usage event whose percent is at least the config's threshold.
#
#   modules:
#     disk-alert:
#       exec: ["/usr/local/lib/eventbus/modules/disk-alert.sh"]
#       subscribe: ["user.disk.usage"]
#       config: { threshold: 90 }
#
# Try it: eventbus post user.disk.usage path=/ percent=95; eventbus tail disk.alert

# The hello line: {"type":"hello","protocol":1,"module":…,"config":{…},…}
read -r hello
threshold=${hello#*\"threshold\":}
threshold=${threshold%%[,\}]*}
[[ $threshold =~ ^[0-9]+$ ]] || threshold=90
printf '{"type":"log","message":"disk-alert ready, threshold %s%%"}\n' "$threshold"

# One event a line, as `eventbus tail --json` prints it; gap lines say what was dropped.
while read -r line; do
    case "$line" in
        '{"type":"event"'*) ;;
        '{"type":"gap"'*) printf '{"type":"log","level":"warning","message":"events were dropped"}\n'; continue ;;
        *) continue ;;
    esac
    percent=${line#*\"percent\":}
    percent=${percent%%[,\}]*}
    path=${line#*\"path\":\"}
    path=${path%%\"*}
    [[ $percent =~ ^[0-9]+$ ]] || continue
    if (( percent >= threshold )); then
        printf '{"type":"post","name":"disk.alert","fields":{"path":"%s","percent":%s}}\n' "$path" "$percent"
    fi
done
