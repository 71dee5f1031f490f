// Page-run gather/scatter copies for the OrbitKV `cuda` transport.
//
// One launch moves a whole transfer order: the host turns the order's plan into a run table (RunTable.java),
// one entry per chunk of at most `chunk` bytes, with absolute device addresses, and each thread block copies
// entries blockIdx.x, blockIdx.x + gridDim.x, ... (a grid-stride over the table, so the same kernel runs with
// one block per chunk or with a persistent grid).
//
// Why it is shaped like this: a KV page is 16-128 KiB, far too small for one copy call each (~5 us of launch
// cost per page), but plenty for one block. Each thread keeps UNROLL independent 16-byte loads in flight before
// it stores any of them, so a block moves THREADS * UNROLL * 16 bytes per round trip to memory (32 KiB for
// 256 x 8): enough bytes in flight per SM to run at copy bandwidth even though every block starts cold.
//
// Built to PTX for compute_90 by ../../../build-ptx.sh; the PTX is committed under src/main/resources, and the
// driver compiles it for the GPU at module load (so the Java build needs no nvcc).
//
// Kernel names are part of the Java contract (CudaKernels.java): kv_copy_t<threads>_u<unroll>_h<hints>.

#include <stdint.h>

// One run-table entry: 24 bytes, little-endian, exactly as RunTable.java writes it.
struct KvRun {
    unsigned long long src;  // device address of the first source byte
    unsigned long long dst;  // device address of the first destination byte
    unsigned long long len;  // bytes, >= 1
};

// ---- loads and stores ------------------------------------------------------------------------------------------
// Explicit global-space 16-byte accesses (addresses arrive as integers, which would otherwise give generic ones).
// HINTS = 0: plain ld.global / st.global.
// HINTS = 1: loads bypass L1 and ask L2 to fetch whole 256-byte sectors; stores are marked evict-first. Copied KV
//            is touched once, so neither side should push other data out of the caches.

template <int HINTS>
__device__ __forceinline__ int4 load16(const int4* p) {
    int4 v;
    if (HINTS) {
        asm("ld.global.nc.L1::no_allocate.L2::256B.v4.s32 {%0, %1, %2, %3}, [%4];"
            : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
            : "l"(p));
    } else {
        asm("ld.global.v4.s32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    }
    return v;
}

template <int HINTS>
__device__ __forceinline__ void store16(int4* p, const int4& v) {
    if (HINTS) {
        asm volatile("st.global.cs.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    } else {
        asm volatile("st.global.v4.s32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                     : "memory");
    }
}

// ---- one span --------------------------------------------------------------------------------------------------
// Lengths are below 2^32 (RunTable.java cuts runs into chunks of at most 1 GiB), so indices are 32-bit: fewer
// registers and simpler address arithmetic than 64-bit ones.

// src and dst are both 16-byte aligned and len is a multiple of 16: the path every real KV page takes.
template <int THREADS, int UNROLL, int HINTS>
__device__ __forceinline__ void copy_vec16(const int4* __restrict__ sv, int4* __restrict__ dv, unsigned n) {
    unsigned i = threadIdx.x;
    // Full rounds: UNROLL independent 16-byte loads in flight per thread before the first store.
    for (; i + (UNROLL - 1) * THREADS < n; i += UNROLL * THREADS) {
        int4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = load16<HINTS>(sv + i + u * THREADS);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) store16<HINTS>(dv + i + u * THREADS, v[u]);
    }
    // Last partial round (fewer than UNROLL * THREADS words left), still all loads before all stores.
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        if (i + u * THREADS < n) v[u] = load16<HINTS>(sv + i + u * THREADS);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        if (i + u * THREADS < n) store16<HINTS>(dv + i + u * THREADS, v[u]);
}

// src and dst have the same alignment modulo sizeof(V): a byte head up to the first V-aligned address, V-wide
// words, a byte tail. Odd layouts only (pages whose size is not a multiple of 16); correct rather than fast.
template <typename V, int THREADS>
__device__ __forceinline__ void copy_words(const char* __restrict__ s, char* __restrict__ d, unsigned len) {
    const unsigned W = sizeof(V);
    unsigned head = (W - (unsigned)(reinterpret_cast<uintptr_t>(s) & (W - 1))) & (W - 1);
    if (head > len) head = len;
    if (threadIdx.x < head) d[threadIdx.x] = s[threadIdx.x];
    s += head;
    d += head;
    len -= head;
    const unsigned n = len / W;
    const V* __restrict__ sv = reinterpret_cast<const V*>(s);
    V* __restrict__ dv = reinterpret_cast<V*>(d);
    for (unsigned i = threadIdx.x; i < n; i += THREADS) dv[i] = sv[i];
    const unsigned done = n * W;
    if (threadIdx.x < len - done) d[done + threadIdx.x] = s[done + threadIdx.x];
}

template <int THREADS, int UNROLL, int HINTS>
__device__ __forceinline__ void copy_run(const KvRun& r) {
    const unsigned len = (unsigned)r.len;
    if (((r.src | r.dst | r.len) & 15ull) == 0) {
        copy_vec16<THREADS, UNROLL, HINTS>(reinterpret_cast<const int4*>(r.src), reinterpret_cast<int4*>(r.dst), len >> 4);
        return;
    }
    const char* s = reinterpret_cast<const char*>(r.src);
    char* d = reinterpret_cast<char*>(r.dst);
    const unsigned long long x = r.src ^ r.dst;
    if ((x & 15ull) == 0) {
        copy_words<int4, THREADS>(s, d, len);
    } else if ((x & 7ull) == 0) {
        copy_words<unsigned long long, THREADS>(s, d, len);
    } else if ((x & 3ull) == 0) {
        copy_words<unsigned int, THREADS>(s, d, len);
    } else {
        copy_words<unsigned char, THREADS>(s, d, len);
    }
}

template <int THREADS, int UNROLL, int HINTS>
__device__ __forceinline__ void copy_runs(const KvRun* __restrict__ runs, unsigned long long n) {
    for (unsigned long long e = blockIdx.x; e < n; e += gridDim.x) {
        const KvRun r = runs[e];  // every thread reads the same 24 bytes: one broadcast
        copy_run<THREADS, UNROLL, HINTS>(r);
    }
}

#define KV_COPY_KERNEL(T, U, H)                                                                               \
    extern "C" __global__ void __launch_bounds__(T)                                                           \
        kv_copy_t##T##_u##U##_h##H(const KvRun* __restrict__ runs, unsigned long long n) {                    \
        copy_runs<T, U, H>(runs, n);                                                                          \
    }

// The variants the benchmark compares; the transport's default is chosen from its results (docs/bench/gpu.md).
KV_COPY_KERNEL(128, 8, 0)
KV_COPY_KERNEL(128, 8, 1)
KV_COPY_KERNEL(256, 4, 0)
KV_COPY_KERNEL(256, 4, 1)
KV_COPY_KERNEL(256, 8, 0)
KV_COPY_KERNEL(256, 8, 1)
KV_COPY_KERNEL(512, 4, 0)
KV_COPY_KERNEL(512, 4, 1)

// ---- test and benchmark helpers ----------------------------------------------------------------------------------

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// p[i] = splitmix64(seed + i) for i < n: random-looking source data (never time copies of zeros).
extern "C" __global__ void kv_fill_random(unsigned long long* __restrict__ p, unsigned long long n, unsigned long long seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        p[i] = splitmix64(seed + i);
    }
}

// Adds to *mismatches the number of bytes in which dst differs from src, over every run of the table. Written
// independently of the copy kernels (byte by byte), so it checks them rather than repeating their logic.
extern "C" __global__ void kv_compare_runs(const KvRun* __restrict__ runs, unsigned long long n,
                                           unsigned long long* __restrict__ mismatches) {
    for (unsigned long long e = blockIdx.x; e < n; e += gridDim.x) {
        const KvRun r = runs[e];
        const unsigned char* s = reinterpret_cast<const unsigned char*>(r.src);
        const unsigned char* d = reinterpret_cast<const unsigned char*>(r.dst);
        unsigned long long bad = 0;
        for (unsigned long long i = threadIdx.x; i < r.len; i += blockDim.x) bad += (s[i] != d[i]);
        if (bad) atomicAdd(mismatches, bad);
    }
}
