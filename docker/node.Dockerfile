# The agent-node image of a Ray cluster (docs/ray.md, deploy/kuberay-raycluster.yaml): the
# agent image of sandbox=docker plus what a node runs, with spu installed from its wheel
# (no checkout on the node: its config groups and agents come with the package).
#
#   python -m build --wheel --outdir docker/dist .        # the wheel, from a checkout
#   docker build -f docker/node.Dockerfile -t spu-node:latest docker/
#
# BASE is the agent image (docker/agent.Dockerfile, or offline docker/build-base-image.sh).
# The node needs network while it is built (pip, npm); never once it runs agents.
ARG BASE=spu-agent:latest
FROM ${BASE}

ENV DEBIAN_FRONTEND=noninteractive
# The sandbox of the agents on the node (bubblewrap, the network namespace, the disk image)
# and npm for the agent CLIs.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      bubblewrap passt iptables e2fsprogs iproute2 npm \
 && rm -rf /var/lib/apt/lists/*

# spu from its wheel, with every extra (Ray, Docker, PostgreSQL, NVML, the web tools).
COPY dist/ /tmp/spu-dist/
RUN python3 -m venv /opt/spu \
 && /opt/spu/bin/pip install --no-cache-dir "$(ls /tmp/spu-dist/spu-*-py3-none-any.whl)[all]" \
 && rm -rf /tmp/spu-dist
ENV PATH=/opt/spu/bin:${PATH}

# The agent CLIs the packaged harness configs pin (make cli-tools in a checkout).
RUN conf="$(python -c 'from spu.project import PACKAGED_CONF; print(PACKAGED_CONF)')" \
 && python -m spu.harness.npm_tools "$conf/harness/claude_code.yaml" "$conf/harness/codex.yaml"

CMD ["/bin/bash"]
