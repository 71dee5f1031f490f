#!/usr/bin/env bash
# Run here (the build machine), from the repository root, on a fresh clone too: builds what `bench real-model` needs on
# the GPU machine, which has CUDA, PyTorch and transformers but no Java. Two bundles, each under the 64 MiB one device
# call may carry, staged there by two calls in a row (docs/gpu.md, "The real-model run"):
#   .device/real/jre.tar.xz   a Java 25 runtime with the modules the distribution uses (jdeps), ~36 MB
#   .device/real/lib.tar.xz   the distribution's jars; RocksDB's is left out (the run's decider keeps its state in memory), and
#                             the Hugging Face tokenizer's (the run's proxy counts tokens without one) and Kafka's unused
#                             compression codecs
set -euo pipefail
cd "$(dirname "$0")/.."
jdk=${JAVA_HOME:-}
if [ -z "$jdk" ] || ! "$jdk/bin/java" -version 2>&1 | grep -qE 'version "(2[2-9]|[3-9][0-9])'; then
  jdk=$(ls -d /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/*25* 2>/dev/null | head -n1)
fi
[ -x "$jdk/bin/jlink" ] || { echo "no JDK 22+ with jlink found (set JAVA_HOME)" >&2; exit 1; }
export JAVA_HOME=$jdk
./orbitkv-pd build                       # the distribution: cli/target/orbitkv-pd.jar and cli/target/lib
stage=.device/real
rm -rf "$stage" && mkdir -p "$stage/lib"
cp cli/target/orbitkv-pd.jar cli/target/lib/*.jar "$stage/lib/"
rm -f "$stage"/lib/rocksdbjni-*.jar
# the proxy's Hugging Face tokenizer (18 MB with its native libraries) is loaded only for proxy.tokenizer.file, which the
# run's random-weight model does not use: without it the bundle stays under what one device call carries
rm -f "$stage"/lib/tokenizers-*.jar "$stage"/lib/jna-*.jar
# Kafka's zstd and snappy codecs (native libraries, 8.6 MB) are loaded only for batches compressed with them, and no
# component compresses (compression.type none)
rm -f "$stage"/lib/zstd-jni-*.jar "$stage"/lib/snappy-java-*.jar
mods=$("$jdk/bin/jdeps" --print-module-deps --ignore-missing-deps --multi-release 25 --class-path "$stage/lib/*" "$stage/lib/orbitkv-pd.jar")
mods="$mods,jdk.zipfs,jdk.naming.dns,jdk.net,java.instrument"
"$jdk/bin/jlink" --add-modules "$mods" --strip-debug --no-man-pages --no-header-files --compress=zip-9 --output "$stage/jre"
tar -C "$stage" -cJf "$stage/jre.tar.xz" jre
tar -C "$stage" -cJf "$stage/lib.tar.xz" lib
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo /.device/ >> .git/info/exclude
rm -rf "$stage/jre" "$stage/lib"
echo "modules: $mods"
du -h "$stage"/*.tar.xz
