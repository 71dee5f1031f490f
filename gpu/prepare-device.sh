#!/usr/bin/env bash
# Run here (the build machine), from the repository root: builds what a GPU run needs into .device/ (git-ignored),
# which travels with the working tree to the GPU machine (it has CUDA but no Java):
#   .device/jre   a small Java 25 runtime (../shared/gpu/build-jre.sh: java.base + jdk.unsupported)
#   .device/lib   this module's jar and its runtime jars, Kafka's left out (GPU runs exercise the data plane only), and the
#                 bench module's jar (the GPU suite's entry point, io.orbitkv.pd.bench.gpu.GpuSuite)
# Then, on the GPU machine: gpu/run-gpu-suite.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
# install, not package: dependency:build-classpath below resolves the sibling modules from the local repository
mvn -q -o -pl gpu,bench -am -DskipTests install
mvn -q -o -pl gpu dependency:build-classpath -Dmdep.outputFile="$PWD/gpu/target/gpu.classpath" -Dmdep.includeScope=runtime >/dev/null
rm -rf .device/lib && mkdir -p .device/lib
cp gpu/target/orbitkv-gpu-*.jar bench/target/orbitkv-bench-*.jar .device/lib/
tr ':' '\n' < gpu/target/gpu.classpath | grep -vE 'kafka-clients|zstd|lz4|snappy|junit|opentest4j|apiguardian|jspecify|assertj|byte-buddy|awaitility|hamcrest|logback' |
  while read -r jar; do cp "$jar" .device/lib/; done
# the worker/schemas jars from this tree (the local repository may hold another helper's build)
cp transfer-worker/target/orbitkv-transfer-worker-*.jar schemas/target/orbitkv-schemas-*.jar .device/lib/
if [ ! -x .device/jre/bin/java ]; then
  jre_script=${BUILD_JRE:-../shared/gpu/build-jre.sh}
  [ -x "$jre_script" ] || jre_script=/work/shared/gpu/build-jre.sh
  "$jre_script" .device/jre
fi
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo /.device/ >> .git/info/exclude
du -sh .device/jre .device/lib
ls .device/lib
