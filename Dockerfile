# The airlock appliance image. Build it with scripts/build-image (no registry needed): it
# builds the local base airlock-base:bookworm once (docker/build-base.sh: debootstrap +
# docker import, or docker/Dockerfile.registry where a registry is reachable), builds the
# release binaries on the host and runs `docker build` on a small staging context holding
# only them and the default policy. Run it as docs/docker.md says (scripts/docker-run).
FROM airlock-base:bookworm

# Users (design §2): the proxy and the git service as system users with no shell and no
# home; the agent as uid/gid 1000 (the usual owner of a developer's checkout). Then: no
# setuid/setgid binary is left (su, mount, passwd, ... become ordinary programs), and no
# sudo, wget or nc is installed in the first place (the smoke tests check all of this).
RUN set -eu; \
    groupadd --system airlock; \
    useradd --system --gid airlock --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin airlock; \
    groupadd --system airlock-git; \
    useradd --system --gid airlock-git --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin airlock-git; \
    groupadd --gid 1000 agent; \
    useradd --uid 1000 --gid agent --home-dir /home/agent --create-home --shell /bin/bash agent; \
    find / -xdev -type f -perm /6000 -exec chmod ug-s {} +; \
    test -z "$(find / -xdev -type f -perm /6000)"; \
    for b in sudo wget nc netcat ncat socat; do ! command -v "$b"; done; \
    mkdir -p /etc/airlock /workspace /var/log/airlock /run/airlock; \
    chmod 0755 /etc/airlock /workspace; \
    rm -rf /var/log/*.log /var/cache/ldconfig/aux-cache

# CA trust: Debian's bundle path becomes a symlink to the per-start bundle the entrypoint
# writes on tmpfs (system roots + this start's appliance CA), so tools that only read the
# system path trust the proxy's interception too; the real roots move to where the
# entrypoint reads them (entrypoint/src/trust.rs).
RUN set -eu; \
    mkdir -p /usr/share/airlock; \
    mv /etc/ssl/certs/ca-certificates.crt /usr/share/airlock/system-roots.pem; \
    ln -s /run/airlock/ca-bundle.pem /etc/ssl/certs/ca-certificates.crt

# Git (design §5): the repository's .git is bind-mounted at /var/lib/airlock/git/workspace.git
# (docs/docker.md), under a parent only the git service can traverse (root:airlock-git 0710);
# the agent's `git` and `git-credential-airlock` are the shims, first on its PATH.
RUN set -eu; \
    mkdir -p /var/lib/airlock/git/workspace.git /usr/local/lib/airlock/bin; \
    chown root:airlock-git /var/lib/airlock/git; \
    chmod 0710 /var/lib/airlock/git
COPY git git-credential-airlock airlock-request /usr/local/lib/airlock/bin/
COPY airlock-entrypoint airlock-proxy airlock-git-api /usr/local/bin/
COPY policy.toml /etc/airlock/policy.toml
RUN chmod 0755 /usr/local/bin/airlock-entrypoint /usr/local/bin/airlock-proxy \
        /usr/local/bin/airlock-git-api /usr/local/lib/airlock/bin/git \
        /usr/local/lib/airlock/bin/git-credential-airlock \
        /usr/local/lib/airlock/bin/airlock-request && \
    chmod 0644 /etc/airlock/policy.toml && \
    ln -s airlock-entrypoint /usr/local/bin/airlock-session && \
    /usr/local/bin/airlock-entrypoint --check
# A login shell (`bash -l`, as some agents run every command) reads /etc/profile, which resets
# PATH: airlock's git shim goes first again, as the entrypoint sets it for the agent.
RUN printf '%s\n' 'case ":$PATH:" in' '*:/usr/local/lib/airlock/bin:*) ;;' \
        '*) PATH="/usr/local/lib/airlock/bin:$PATH" ;;' 'esac' 'export PATH' \
        >/etc/profile.d/airlock-path.sh && chmod 0644 /etc/profile.d/airlock-path.sh

# The shell sandbox (this image) has git, curl and the basics; the agent images built on it
# (scripts/build-agent-image) add python3, pip, venv, make, gcc, node, npm, rg and jq. An
# interactive shell says so at the first such command instead of only "command not found".
RUN printf '%s\n' \
        'command_not_found_handle() {' \
        '    case $1 in' \
        '    python|python3|pip|pip3|make|gcc|cc|g++|node|npm|npx|rg|jq)' \
        '        printf "airlock: %s is not in this image (the shell sandbox); the agent images have python3, pip, make, gcc, node, npm, rg and jq: airlock run REPO --agent claude (or codex, aider)\\n" "$1" >&2 ;;' \
        '    *) printf "bash: %s: command not found\\n" "$1" >&2 ;;' \
        '    esac' \
        '    return 127' \
        '}' >>/etc/bash.bashrc

# The preflight checks the documented run command (read-only root, tmpfs, volumes, caps).
# No VOLUME for /var/log/airlock on purpose: an anonymous volume would hide a forgotten
# `-v airlock-audit:/var/log/airlock` (and `--rm` would then delete the audit log).
ENV AIRLOCK_PREFLIGHT=container
WORKDIR /workspace
ENTRYPOINT ["/usr/local/bin/airlock-entrypoint"]
CMD ["bash"]
