package io.orbitkv.pd.runtime;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Path;
import java.util.Optional;

/**
 * A native library bound through the FFM API (the CUDA driver, Mooncake's transfer engine): the one place that uses
 * the API's restricted methods (library lookup, downcall handles, reading raw addresses). Run with
 * {@code --enable-native-access=ALL-UNNAMED} to keep the JDK from warning about them. A library stays loaded for the
 * life of the process (drivers are not unloaded; engines run threads inside them).
 */
@SuppressWarnings("restricted")
public final class NativeLibrary {

    private static final Linker LINKER = Linker.nativeLinker();
    private static final int RTLD_NOW = 2;

    /** A symbol the library lacks; the message is the symbol's name. */
    public static final class MissingSymbol extends RuntimeException {
        MissingSymbol(String symbol) {
            super(symbol, null, false, false);
        }
    }

    /** A library that could not be loaded, with the dynamic loader's own words. */
    public static final class LoadFailure extends Exception {
        private final String reason;

        LoadFailure(String library, String reason) {
            super("cannot load " + library + ": " + reason, null, false, false);
            this.reason = reason;
        }

        /** Why, without the library's name. */
        public String reason() {
            return reason;
        }
    }

    private final String name;
    private final SymbolLookup lookup;

    private NativeLibrary(String name, SymbolLookup lookup) {
        this.name = name;
        this.lookup = lookup;
    }

    /**
     * dlopen()s {@code library}: a file name searched as the loader searches ({@code libcuda.so.1}) or a path.
     *
     * @throws LoadFailure {@code cannot load <library>: <why>}, the why in the loader's words where it can be asked
     *                     (a missing dependency, a wrong ELF class, no such file), not the JDK's bare "Cannot open library"
     */
    public static NativeLibrary open(String library) throws LoadFailure {
        try {
            return new NativeLibrary(library, SymbolLookup.libraryLookup(library, Arena.global()));
        } catch (IllegalArgumentException | UnsatisfiedLinkError e) {
            throw new LoadFailure(library, dlerror(library).orElse(e.getMessage()));
        }
    }

    /** {@link #open(String)} for a path. */
    public static NativeLibrary open(Path library) throws LoadFailure {
        return open(library.toString());
    }

    /** The name or path it was opened by. */
    public String name() {
        return name;
    }

    /** A downcall handle for {@code symbol}; {@link MissingSymbol} when the library lacks it. */
    public MethodHandle bind(String symbol, FunctionDescriptor descriptor) {
        return bindOptional(symbol, descriptor).orElseThrow(() -> new MissingSymbol(symbol));
    }

    /** A downcall handle for {@code symbol}, or empty when the library lacks it (an entry point newer drivers have). */
    public Optional<MethodHandle> bindOptional(String symbol, FunctionDescriptor descriptor) {
        return lookup.find(symbol).map(address -> LINKER.downcallHandle(address, descriptor));
    }

    /** The NUL-terminated string at a native address ("" for NULL; at most 64 KiB are looked at). */
    public static String cString(MemorySegment p) {
        return p.equals(MemorySegment.NULL) ? "" : p.reinterpret(65_536).getString(0);
    }

    /** A native address the library returned, as a segment of {@code bytes} (memory the process owns). */
    public static MemorySegment sized(MemorySegment p, long bytes) {
        return p.reinterpret(bytes);
    }

    /** What dlopen(3) says about {@code library}, if libc's loader can be called from here. */
    private static Optional<String> dlerror(String library) {
        try {
            SymbolLookup libc = LINKER.defaultLookup();
            Optional<MemorySegment> open = libc.find("dlopen");
            Optional<MemorySegment> error = libc.find("dlerror");
            Optional<MemorySegment> close = libc.find("dlclose");
            if (open.isEmpty() || error.isEmpty() || close.isEmpty()) {
                return Optional.empty();
            }
            MethodHandle dlopen = LINKER.downcallHandle(open.get(), FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT));
            MethodHandle dlerror = LINKER.downcallHandle(error.get(), FunctionDescriptor.of(ADDRESS));
            MethodHandle dlclose = LINKER.downcallHandle(close.get(), FunctionDescriptor.of(JAVA_INT, ADDRESS));
            try (Arena a = Arena.ofConfined()) {
                MemorySegment handle = (MemorySegment) dlopen.invokeExact(a.allocateFrom(library), RTLD_NOW);
                if (!handle.equals(MemorySegment.NULL)) {
                    int ignored = (int) dlclose.invokeExact(handle);
                    return Optional.of("the JDK could not open it, although dlopen can");
                }
                MemorySegment msg = (MemorySegment) dlerror.invokeExact();
                return msg.equals(MemorySegment.NULL) ? Optional.empty() : Optional.of("dlopen: " + cString(msg));
            }
        } catch (Throwable t) {
            return Optional.empty();
        }
    }
}
