# tensorgrid, Vulkan build: rpc-server and the client tools with the Vulkan loader and Mesa's
# drivers (radv, anv, nouveau, and lavapipe, which runs Vulkan on the CPU where no GPU is).
#   bash deploy/docker/build-image.sh vulkan      (BuildKit, else the classic builder)
# Give the container the GPU's render nodes: docker run --device /dev/dri ...
#
# TG_VULKAN: the Vulkan backend (backends/vulkan) is still being written; until it lands
# this image builds with TG_VULKAN=OFF (the CPU backend, with the Vulkan runtime in place).
# Build with --build-arg TG_VULKAN=ON once it has landed (then the default here becomes ON).
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
COPY deploy/docker/build.sh /usr/local/bin/tg-docker-build
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    tg-docker-build deps libvulkan-dev glslc
COPY . /src
ARG TG_VULKAN=OFF
ARG TG_CPU_FLAGS="-mavx2;-mfma;-mf16c"
# The loader comes from the runtime stage's libvulkan1, matched to its ICDs.
ENV CCACHE_DIR=/root/.cache/ccache TG_CPU_FLAGS=${TG_CPU_FLAGS} TG_COLLECT_EXCLUDE="libvulkan"
RUN --mount=type=cache,target=/root/.cache/ccache \
    tg-docker-build build -DTG_VULKAN=${TG_VULKAN} -DTG_CUDA=OFF && tg-docker-build collect /out

FROM ${BASE_IMAGE} AS runtime
# The drivers are loaded by the Vulkan loader at run time (ICD files), so ldd cannot find
# them: they are installed, not collected.
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    rm -f /etc/apt/apt.conf.d/docker-clean && apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libvulkan1 mesa-vulkan-drivers >/dev/null && \
    groupadd --system --gid 10001 tensorgrid && \
    useradd --system --uid 10001 --gid 10001 --groups video --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin tensorgrid && \
    mkdir -p /var/cache/tensorgrid && chown 10001:10001 /var/cache/tensorgrid
COPY --from=build /out/lib/ /usr/local/lib/tensorgrid/
COPY --from=build /out/bin/ /usr/local/bin/
COPY deploy/docker/tg-entrypoint.sh /usr/local/bin/tg-entrypoint
# No setuid/setgid programs (the base's su, mount, passwd, ...): nothing in the image can
# gain privileges, whatever the container's options (tests/deploy lists them).
RUN echo /usr/local/lib/tensorgrid > /etc/ld.so.conf.d/tensorgrid.conf && ldconfig && \
    rpc-server --help >/dev/null && tg-run --help >/dev/null && \
    find / -xdev -perm /6000 -type f -exec chmod a-s {} +
ARG TG_VULKAN=OFF
LABEL org.opencontainers.image.title="tensorgrid" org.tensorgrid.backend="vulkan" \
      org.tensorgrid.vulkan-backend="${TG_VULKAN}"
ENV TG_CACHE_DIR=/var/cache/tensorgrid
USER 10001:10001
EXPOSE 50052 8081 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["tg-entrypoint", "health"]
ENTRYPOINT ["tg-entrypoint"]
CMD ["rpc-server"]
