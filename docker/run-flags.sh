# The documented `docker run` flags, one per line (sourced by scripts/docker-run and the smoke
# tests, so what is documented is what is tested). docs/docker.md explains each line.
# Expects: $repo (host path of the repository), $audit_volume (name or host path).
# When the repository has a .git directory, it is handed to the git service and hidden from
# the agent (the last two lines); without one there is no git in the workspace.
# Every writable tmpfs has a size, and the sizes (with Docker's 64m /dev and /dev/shm) plus
# the 1g the processes need fit --memory: a full tmpfs is ENOSPC, never a wedged container.
# The values are airlock-control's (control/src/{caps,tmpfs,limits,paths}.rs), the one
# definition the CLI renders and the entrypoint's preflight checks: cli/src/flags/tests.rs
# holds this file to the CLI's rendering word for word, and entrypoint/src/preflight.rs's
# tests check that the preflight accepts it (and compose.yaml).
# shellcheck disable=SC2034,SC2154 # the array is used by whoever sources this file
AIRLOCK_RUN_FLAGS=(
    --cap-drop ALL
    --cap-add NET_ADMIN
    --cap-add SETUID
    --cap-add SETGID
    --cap-add SETPCAP
    --cap-add KILL
    --cap-add CHOWN
    --cap-add FOWNER
    --cap-add DAC_OVERRIDE
    --security-opt no-new-privileges
    --read-only
    --tmpfs /tmp:rw,exec,nosuid,nodev,size=512m
    --tmpfs /run:rw,nosuid,nodev,noexec,size=64m
    --tmpfs /home/agent:rw,exec,nosuid,nodev,uid=1000,gid=1000,mode=0700,size=1g
    --pids-limit 512
    --memory 4g
    --cpus 2
    -v "$repo:/workspace"
    -v "$audit_volume:/var/log/airlock"
)
if [ -d "$repo/.git" ]; then
    AIRLOCK_RUN_FLAGS+=(
        -v "$repo/.git:/var/lib/airlock/git/workspace.git"
        --tmpfs /workspace/.git:ro,nosuid,nodev,noexec,mode=0555
    )
fi
