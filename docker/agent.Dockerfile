# The agent image of sandbox=docker for real deployments (paper 2.1: a Debian machine where the
# agent can run code and install software; GPU libraries are left to the agent).
#
#   docker build -f docker/agent.Dockerfile -t spu-agent:latest docker/
#
# Without registry access, build the same tag offline instead: docker/build-base-image.sh.
# GPUs reach the container through the NVIDIA container toolkit (device_requests), which
# mounts the driver libraries; CUDA itself is the agent's to install.
FROM debian:bookworm-slim

ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv python3-pip ca-certificates curl git procps nodejs \
      build-essential \
 && rm -rf /var/lib/apt/lists/*

# The layout every backend shows: /task (read-only bind), /workspace, /output.
RUN mkdir -p /task /workspace /output
WORKDIR /workspace
ENV HOME=/workspace
CMD ["/bin/bash"]
