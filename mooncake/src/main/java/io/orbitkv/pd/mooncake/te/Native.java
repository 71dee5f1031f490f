package io.orbitkv.pd.mooncake.te;

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
 * The one place that uses the FFM API's restricted methods (library lookup, downcall handles, reading C strings
 * at raw addresses). Run with {@code --enable-native-access=ALL-UNNAMED} to keep the JDK from warning about them.
 */
@SuppressWarnings("restricted")
final class Native {

    private static final Linker LINKER = Linker.nativeLinker();
    private static final int RTLD_NOW = 2;

    private Native() { }

    /** A symbol the library lacks. */
    static final class MissingSymbol extends RuntimeException {
        MissingSymbol(String symbol) {
            super(symbol, null, false, false);
        }
    }

    /** A library that could not be loaded, with the dynamic loader's own words. */
    static final class LoadFailure extends Exception {
        LoadFailure(String message) {
            super(message, null, false, false);
        }
    }

    /** A loaded library; it stays loaded for the life of the process (its engines run threads inside it). */
    record Library(Path path, SymbolLookup lookup) {

        MethodHandle bind(String symbol, FunctionDescriptor descriptor) {
            return lookup.find(symbol).map(address -> LINKER.downcallHandle(address, descriptor)).orElseThrow(() -> new MissingSymbol(symbol));
        }
    }

    /**
     * dlopen()s {@code path} for good.
     *
     * @throws LoadFailure naming the path and the loader's error (a missing dependency, a wrong ELF class, ...)
     */
    static Library open(Path path) throws LoadFailure {
        try {
            return new Library(path, SymbolLookup.libraryLookup(path, Arena.global()));
        } catch (IllegalArgumentException | UnsatisfiedLinkError e) {
            // The JDK says only "Cannot open library"; the loader knows why (missing libglog.so.1, not an ELF file, ...).
            String why = dlerror(path).orElse(e.getMessage());
            throw new LoadFailure("cannot load " + path + ": " + why);
        }
    }

    /** What dlopen(3) says about {@code path}, if libc's loader can be called from here. */
    private static Optional<String> dlerror(Path path) {
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
                MemorySegment handle = (MemorySegment) dlopen.invokeExact(a.allocateFrom(path.toString()), RTLD_NOW);
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

    /** The NUL-terminated string at a native address (at most 64 KiB are looked at). */
    static String cString(MemorySegment p) {
        return p.equals(MemorySegment.NULL) ? "" : p.reinterpret(65_536).getString(0);
    }

    /** {@code count} structs of {@code bytes} each at a native address returned by the library. */
    static MemorySegment sized(MemorySegment p, long bytes) {
        return p.reinterpret(bytes);
    }
}
