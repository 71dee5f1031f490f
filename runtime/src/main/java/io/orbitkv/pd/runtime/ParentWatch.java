package io.orbitkv.pd.runtime;

import java.util.Optional;

/**
 * Lets a component started by a launcher (the demo, the benchmark, the tests) die with it: with
 * {@code -Dorbitkv.parentPid=PID} the process exits (running its shutdown hooks) once that process is gone, so a
 * launcher killed with {@code kill -9} leaves nothing behind.
 */
public final class ParentWatch {

    public static final String PROPERTY = "orbitkv.parentPid";

    private ParentWatch() { }

    /** Called first by a component's {@code main}: watches the launcher named by {@value #PROPERTY}, if any. */
    public static void install() {
        String pid = System.getProperty(PROPERTY);
        if (pid == null || pid.isBlank()) {
            return;
        }
        Optional<ProcessHandle> parent = ProcessHandle.of(Long.parseLong(pid.strip()));
        if (parent.isEmpty()) {
            System.err.println("orbitkv-pd: launcher process " + pid + " is already gone; not starting");
            System.exit(3);
        }
        parent.get().onExit().thenRun(() -> {
            System.err.println("orbitkv-pd: launcher process " + pid + " exited; stopping");
            Thread.ofPlatform().name("orphan-exit").start(() -> System.exit(0));
        });
    }
}
