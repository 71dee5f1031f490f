package io.orbitkv.pd.gpu.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.util.Optional;

/**
 * The one place that uses the FFM API's restricted methods (library lookup, downcall handles, resizing raw
 * pointers). Run with {@code --enable-native-access=ALL-UNNAMED} to keep the JDK from warning about them.
 */
@SuppressWarnings("restricted")
final class Native {

    private static final Linker LINKER = Linker.nativeLinker();

    private Native() { }

    /** A symbol the library lacks. */
    static final class MissingSymbol extends RuntimeException {
        MissingSymbol(String symbol) {
            super(symbol, null, false, false);
        }
    }

    /** A loaded library; it stays loaded for the life of the process (drivers are not unloaded). */
    record Library(String name, SymbolLookup lookup) {

        MethodHandle bind(String symbol, FunctionDescriptor descriptor) {
            return bindOptional(symbol, descriptor).orElseThrow(() -> new MissingSymbol(symbol));
        }

        Optional<MethodHandle> bindOptional(String symbol, FunctionDescriptor descriptor) {
            return lookup.find(symbol).map(address -> LINKER.downcallHandle(address, descriptor));
        }
    }

    /**
     * dlopen()s {@code name}.
     *
     * @throws IllegalArgumentException when the library cannot be found or loaded
     */
    static Library open(String name) {
        return new Library(name, SymbolLookup.libraryLookup(name, Arena.global()));
    }

    /** The NUL-terminated string at a native address. */
    static String cString(MemorySegment p) {
        return p.reinterpret(4096).getString(0);
    }

    /** A native address as a segment of {@code bytes}, for memory this process owns (pinned host memory). */
    static MemorySegment sized(MemorySegment p, long bytes) {
        return p.reinterpret(bytes);
    }
}
