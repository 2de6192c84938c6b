# tensorgrid, CPU build: rpc-server and the client tools (tg-run, tg-bench, tg-gguf).
#   bash deploy/docker/build-image.sh cpu      (BuildKit, else the classic builder)
# BASE_IMAGE: the build and runtime base (the runtime stage reuses the build's glibc).
# TG_CPU_FLAGS: the ISA of the portable build (default AVX2+FMA+F16C; "" for the scalar
# fallback); TG_NATIVE stays OFF since images run on other machines than the builder.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
COPY deploy/docker/build.sh /usr/local/bin/tg-docker-build
RUN --mount=type=cache,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,target=/var/lib/apt/lists,sharing=locked \
    tg-docker-build deps
COPY . /src
ARG TG_CPU_FLAGS="-mavx2;-mfma;-mf16c"
ENV CCACHE_DIR=/root/.cache/ccache TG_CPU_FLAGS=${TG_CPU_FLAGS}
RUN --mount=type=cache,target=/root/.cache/ccache \
    tg-docker-build build -DTG_CUDA=OFF -DTG_VULKAN=OFF && tg-docker-build collect /out

FROM ${BASE_IMAGE} AS runtime
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
LABEL org.opencontainers.image.title="tensorgrid" org.tensorgrid.backend="cpu"
ENV TG_CACHE_DIR=/var/cache/tensorgrid
USER 10001:10001
EXPOSE 50052 8081 9090
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["tg-entrypoint", "health"]
ENTRYPOINT ["tg-entrypoint"]
CMD ["rpc-server"]
