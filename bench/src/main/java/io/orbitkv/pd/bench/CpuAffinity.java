package io.orbitkv.pd.bench;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.BitSet;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

/**
 * Pins the threads of this JVM to a set of CPUs (Linux {@code sched_setaffinity}, through the FFM API).
 *
 * <p>Used by the benchmarks to give the embedded broker and the benchmark JVM cores of their own
 * ({@code bench decider --broker-cpus 0 --bench-cpus 1}; docs/decider.md, Performance): on a 2-core machine,
 * letting the scheduler move the threads of two JVMs (more than 100) across both cores cost ~40 % of the decision latency.
 * {@link #pinProcess} pins every thread that exists when it runs; threads started later inherit the mask of the
 * thread that starts them, so pin early (before the clients start).
 */
public final class CpuAffinity {

    /** glibc's {@code cpu_set_t}: 1024 CPUs. */
    private static final int MASK_BYTES = 128;
    private static final int EINVAL = 22;
    private static final int ESRCH = 3;

    private static final StructLayout CAPTURE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = CAPTURE.varHandle(java.lang.foreign.MemoryLayout.PathElement.groupElement("errno"));
    private static final MethodHandle SET;
    private static final MethodHandle GET;
    private static final String UNAVAILABLE;

    static {
        MethodHandle set = null;
        MethodHandle get = null;
        String why = null;
        if (!System.getProperty("os.name", "").toLowerCase(java.util.Locale.ROOT).contains("linux")) {
            why = "CPU pinning needs Linux (sched_setaffinity); this is " + System.getProperty("os.name");
        } else {
            try {
                Linker linker = Linker.nativeLinker();
                FunctionDescriptor fd = FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_LONG, ValueLayout.ADDRESS);
                Linker.Option errno = Linker.Option.captureCallState("errno");
                set = linker.downcallHandle(linker.defaultLookup().find("sched_setaffinity").orElseThrow(), fd, errno);
                get = linker.downcallHandle(linker.defaultLookup().find("sched_getaffinity").orElseThrow(), fd, errno);
            } catch (RuntimeException e) {
                why = "CPU pinning unavailable: the C library has no usable sched_setaffinity/sched_getaffinity (" + e + ")";
            }
        }
        SET = set;
        GET = get;
        UNAVAILABLE = why;
    }

    private CpuAffinity() {
    }

    /** Whether this platform can pin threads; {@link #unavailableReason} says why not. */
    public static boolean supported() {
        return UNAVAILABLE == null;
    }

    /** Why {@link #supported} is false, or null. */
    public static String unavailableReason() {
        return UNAVAILABLE;
    }

    /**
     * Parses a CPU list as {@code taskset -c} and cgroups write it: {@code 0}, {@code 0-3}, {@code 0,2,4-5}.
     *
     * @throws IllegalArgumentException naming the part that is not a CPU number or range
     */
    public static BitSet parse(String spec) {
        if (spec == null || spec.isBlank()) {
            throw new IllegalArgumentException("CPU list is empty; expected e.g. 0, 0-1 or 0,2-3");
        }
        BitSet cpus = new BitSet();
        for (String part : spec.split(",", -1)) {
            String p = part.strip();
            int dash = p.indexOf('-');
            try {
                int from = Integer.parseInt(dash < 0 ? p : p.substring(0, dash));
                int to = dash < 0 ? from : Integer.parseInt(p.substring(dash + 1));
                if (from < 0 || to < from || to >= MASK_BYTES * 8) {
                    throw new NumberFormatException();
                }
                cpus.set(from, to + 1);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("CPU list '" + spec + "': '" + p + "' is not a CPU number or a range a-b (0 ≤ a ≤ b < "
                        + MASK_BYTES * 8 + ")");
            }
        }
        return cpus;
    }

    /** Formats a CPU set as a list ({@code 0-1,4}), the inverse of {@link #parse}. */
    public static String format(BitSet cpus) {
        StringBuilder b = new StringBuilder();
        for (int from = cpus.nextSetBit(0); from >= 0; ) {
            int to = cpus.nextClearBit(from) - 1;
            b.append(b.isEmpty() ? "" : ",").append(from).append(to > from ? "-" + to : "");
            from = cpus.nextSetBit(to + 1);
        }
        return b.toString();
    }

    /** The CPUs a thread may run on ({@code tid} 0: the calling thread). */
    public static BitSet of(long tid) {
        requireSupported();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            MemorySegment state = arena.allocate(CAPTURE);
            int rc = (int) GET.invokeExact(state, (int) tid, (long) MASK_BYTES, mask);
            if (rc != 0) {
                throw new IllegalStateException("sched_getaffinity(" + tid + ") failed, errno " + (int) ERRNO.get(state, 0L));
            }
            return BitSet.valueOf(mask.toArray(ValueLayout.JAVA_LONG));
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    /**
     * Parses {@code spec} ({@link #parse}) and checks that this process can pin to it: supported here, at least one CPU,
     * every one online.
     *
     * @throws IllegalArgumentException naming what is wrong (the message lists the CPUs online)
     * @throws UnsupportedOperationException when this platform cannot pin ({@link #unavailableReason})
     */
    public static BitSet pinnable(String spec) {
        requireSupported();
        BitSet cpus = parse(spec);
        requireOnline(cpus);
        return cpus;
    }

    private static void requireOnline(BitSet cpus) {
        BitSet online = online();
        BitSet outside = (BitSet) cpus.clone();
        outside.andNot(online);
        if (cpus.isEmpty()) {
            throw new IllegalArgumentException("no CPUs to pin to (online: " + format(online) + ")");
        }
        if (!outside.isEmpty()) {
            throw new IllegalArgumentException("CPUs " + format(outside) + " are not online here (online: " + format(online) + ")");
        }
    }

    /**
     * Pins every thread of this JVM to {@code cpus}, and so every thread they start later.
     *
     * @return the number of threads pinned
     * @throws IllegalArgumentException when {@code cpus} is empty, names a CPU that is not online (the message lists
     *                                  those that are), or the process's cpuset would not allow it
     */
    public static int pinProcess(BitSet cpus) {
        requireSupported();
        requireOnline(cpus);
        Set<Long> done = new HashSet<>();
        // A thread started while we walk the list may copy a mask not yet set: walk again until nothing is new.
        for (List<Long> tids = threads(); !done.containsAll(tids); tids = threads()) {
            for (long tid : tids) {
                if (done.add(tid)) {
                    set(tid, cpus);
                }
            }
        }
        BitSet now = of(0);
        if (!now.equals(cpus)) {
            // The kernel keeps a mask inside the process's cpuset (cgroup, container limits): it narrowed ours.
            throw new IllegalArgumentException("asked to pin to CPUs '" + format(cpus) + "', the kernel allowed only " + format(now)
                    + " (a cpuset cgroup or container limit)");
        }
        return done.size();
    }

    /**
     * Pins the calling thread only (and the threads it starts from now on) to {@code cpus}.
     *
     * @return the CPUs it could run on before, to restore with another call
     */
    public static BitSet pinThread(BitSet cpus) {
        requireSupported();
        BitSet before = of(0);
        set(0, cpus);
        return before;
    }

    /** The CPUs online, from {@code /sys/devices/system/cpu/online}; every CPU below the JVM's count when that is unreadable. */
    public static BitSet online() {
        try {
            return parse(Files.readString(Path.of("/sys/devices/system/cpu/online")).strip());
        } catch (IOException | IllegalArgumentException e) {
            BitSet all = new BitSet();
            all.set(0, Runtime.getRuntime().availableProcessors());
            return all;
        }
    }

    private static void set(long tid, BitSet cpus) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment mask = arena.allocate(MASK_BYTES, 8);
            long[] words = cpus.toLongArray();
            for (int i = 0; i < words.length; i++) {
                mask.setAtIndex(ValueLayout.JAVA_LONG, i, words[i]);
            }
            MemorySegment state = arena.allocate(CAPTURE);
            int rc = (int) SET.invokeExact(state, (int) tid, (long) MASK_BYTES, mask);
            if (rc != 0) {
                int errno = (int) ERRNO.get(state, 0L);
                if (errno == ESRCH) {
                    return; // the thread ended meanwhile
                }
                throw new IllegalStateException("sched_setaffinity(" + tid + ", " + format(cpus) + ") failed, errno " + errno
                        + (errno == EINVAL ? " (none of these CPUs is online or allowed)" : ""));
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(t);
        }
    }

    /** The ids of this JVM's threads, from {@code /proc/self/task}. */
    static List<Long> threads() {
        try (Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            return tasks.map(p -> Long.parseLong(p.getFileName().toString())).toList();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot list this process's threads in /proc/self/task", e);
        }
    }

    private static void requireSupported() {
        if (UNAVAILABLE != null) {
            throw new UnsupportedOperationException(UNAVAILABLE);
        }
    }
}
