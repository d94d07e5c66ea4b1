#!/bin/bash
# A bash exec module with no helper: reads the hello, subscribes, answers each user.ping with a
# user.pong carrying its n (ExecModuleTests).
read -r hello
printf '{"type":"subscribe","patterns":["user.ping"]}\n'
printf '{"type":"log","level":"info","message":"bash pong ready"}\n'
while read -r line; do
    case "$line" in
        '{"type":"event"'*) ;;
        *) continue ;;
    esac
    n=${line#*\"fields\":\{}
    n=${n#*\"n\":}
    n=${n%%[,\}]*}
    printf '{"type":"post","name":"user.pong","fields":{"n":%s,"shell":"bash"}}\n' "${n:-0}"
done
