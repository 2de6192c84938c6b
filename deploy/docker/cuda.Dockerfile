# tensorgrid, CUDA build: rpc-server and the client tools on NVIDIA's CUDA images.
#   bash deploy/docker/build-image.sh cuda      (BuildKit, else the classic builder)
# Run with the NVIDIA container toolkit: docker run --gpus all ... (docs/deployment.md).
#
# TG_CUDA: the CUDA backend (default ON; OFF builds the CPU backend alone on a CUDA base).
# CUDA_BUILD_IMAGE / CUDA_RUNTIME_IMAGE: the bases (Ubuntu 24.04 has the same gRPC, protobuf
# and Abseil as Debian 12). Without Docker Hub, make-base-images.sh --cuda makes local ones
# from this host's toolkit: tensorgrid/cuda-local:devel and :runtime.
# TG_CUDA_ARCHS: the GPUs to compile for (CMAKE_CUDA_ARCHITECTURES syntax; empty: the
# project's default list, Turing to Hopper; one architecture, e.g. 90, builds much faster).
ARG CUDA_BUILD_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04
ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

FROM ${CUDA_BUILD_IMAGE} AS build
COPY deploy/docker/build.sh /usr/local/bin/tg-docker-build
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    tg-docker-build deps
COPY . /src
ARG TG_CUDA=ON
ARG TG_CUDA_ARCHS=""
ARG TG_CPU_FLAGS="-mavx2;-mfma;-mf16c"
# The CUDA libraries come with the runtime base (and libcuda with the host's driver): the
# image must not carry copies of its own.
ENV CCACHE_DIR=/root/.cache/ccache TG_CPU_FLAGS=${TG_CPU_FLAGS} \
    TG_COLLECT_EXCLUDE="libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink"
RUN --mount=type=cache,target=/root/.cache/ccache \
    tg-docker-build build -DTG_CUDA=${TG_CUDA} ${TG_CUDA_ARCHS:+"-DTG_CUDA_ARCHS=${TG_CUDA_ARCHS}"} \
        -DTG_VULKAN=OFF && \
    tg-docker-build collect /out

FROM ${CUDA_RUNTIME_IMAGE} AS runtime
RUN groupadd --system --gid 10001 tensorgrid && \
    useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin tensorgrid && \
    mkdir -p /var/cache/tensorgrid && chown 10001:10001 /var/cache/tensorgrid
COPY --from=build /out/lib/ /usr/local/lib/tensorgrid/
COPY --from=build /out/bin/ /usr/local/bin/
COPY deploy/docker/tg-entrypoint.sh /usr/local/bin/tg-entrypoint
# No setuid/setgid programs (the base's su, mount, passwd, ...): nothing in the image can
# gain privileges, whatever the container's options (tests/deploy lists them).
RUN echo /usr/local/lib/tensorgrid > /etc/ld.so.conf.d/tensorgrid.conf && ldconfig && \
    rpc-server --help >/dev/null && tg-run --help >/dev/null && \
    find / -xdev -perm /6000 -type f -exec chmod a-s {} +
ARG TG_CUDA=ON
LABEL org.opencontainers.image.title="tensorgrid" org.tensorgrid.backend="cuda" \
      org.tensorgrid.cuda-backend="${TG_CUDA}"
ENV TG_CACHE_DIR=/var/cache/tensorgrid NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
EXPOSE 50052 8081 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["tg-entrypoint", "health"]
ENTRYPOINT ["tg-entrypoint"]
CMD ["rpc-server"]
