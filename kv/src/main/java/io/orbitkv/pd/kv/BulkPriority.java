package io.orbitkv.pd.kv;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.Locale;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs bulk KV work — page bytes copied through the kernel by a transport, KV materialised or checked by a simulated
 * engine — at a lower CPU priority than the control plane (Linux {@code setpriority} on the calling thread, through
 * the FFM API), so that a Kafka poll, a decision or an HTTP event that becomes runnable preempts it instead of waiting
 * behind it.
 *
 * <p>Why: in production the KV is produced by a GPU and moved by a NIC or a copy engine, and the CPU runs the control
 * plane; on a small machine where both share the cores, a handoff's Kafka hops measured 3–4× a raw hop at four
 * requests in flight because every wake-up queued behind page copies (docs/bench/e2e.md). The bulk work keeps all idle
 * CPU: niceness changes who runs first, not how much gets done. Raising one's own niceness needs no privilege.
 *
 * <p>Best effort: on a platform without {@code setpriority} (or with the value 0) it does nothing, and says so once.
 */
public final class BulkPriority {

    private static final Logger log = LoggerFactory.getLogger(BulkPriority.class);
    /** {@code PRIO_PROCESS}: with a thread id, Linux applies the niceness to that thread alone. */
    private static final int PRIO_PROCESS = 0;
    private static final MethodHandle SETPRIORITY;
    private static final MethodHandle GETTID;
    private static final ThreadLocal<Integer> APPLIED = new ThreadLocal<>();
    private static volatile boolean warned;

    static {
        MethodHandle set = null;
        MethodHandle tid = null;
        if (System.getProperty("os.name", "").toLowerCase(Locale.ROOT).contains("linux")) {
            try {
                Linker linker = Linker.nativeLinker();
                set = linker.downcallHandle(linker.defaultLookup().find("setpriority").orElseThrow(),
                        FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.JAVA_INT));
                tid = linker.downcallHandle(linker.defaultLookup().find("gettid").orElseThrow(), FunctionDescriptor.of(ValueLayout.JAVA_INT));
            } catch (RuntimeException e) { // no such symbol, or native access not enabled
                set = null;
                tid = null;
            }
        }
        SETPRIORITY = set;
        GETTID = tid;
    }

    private BulkPriority() { }

    /**
     * Gives the calling thread niceness {@code nice} (0..19; 0 leaves it as it is) unless it already has it. Cheap
     * after the first call on a thread, so call it at the start of every bulk task.
     */
    public static void apply(int nice) {
        if (nice <= 0) {
            return;
        }
        Integer done = APPLIED.get();
        if (done != null && done == nice) {
            return;
        }
        APPLIED.set(nice);
        if (SETPRIORITY == null) {
            warnOnce("no setpriority/gettid on this platform: bulk KV work runs at normal priority");
            return;
        }
        try {
            int tid = (int) GETTID.invokeExact();
            int rc = (int) SETPRIORITY.invokeExact(PRIO_PROCESS, tid, Math.min(19, nice));
            if (rc != 0) {
                warnOnce("setpriority(" + nice + ") failed: bulk KV work runs at normal priority");
            }
        } catch (Throwable t) {
            warnOnce("setpriority(" + nice + ") failed (" + t + "): bulk KV work runs at normal priority");
        }
    }

    /**
     * Gives the calling thread a negative niceness {@code nice} (-20..-1): work on the token path — a stream's reads in a
     * load client — that bulk and control-plane work on the same cores must not delay. Needs the privilege to raise a
     * priority (root, or CAP_SYS_NICE); without it the thread stays as it is. Returns whether it was applied.
     */
    public static boolean latencyCritical(int nice) {
        if (nice >= 0 || SETPRIORITY == null) {
            return false;
        }
        try {
            int tid = (int) GETTID.invokeExact();
            return (int) SETPRIORITY.invokeExact(PRIO_PROCESS, tid, Math.max(-20, nice)) == 0;
        } catch (Throwable t) {
            return false;
        }
    }

    private static void warnOnce(String message) {
        if (!warned) {
            warned = true;
            log.warn(message);
        }
    }
}
