package io.orbitkv.pd.mooncake;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.mooncake.te.MooncakeUnavailableException;
import io.orbitkv.pd.transport.KvTransportProvider;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The transport is found by name, and without a usable library it says why, naming the path and the loader's error. */
class MooncakeTransportProviderTest {

    @Test
    void foundByNameThroughTheServiceLoader() {
        assertThat(KvTransportProvider.find("mooncake")).get().isInstanceOf(MooncakeTransportProvider.class);
    }

    @Test
    void withoutAPathTheReasonSaysWhatToSet() {
        MooncakeEngine.Availability a = MooncakeEngine.load(null, null);
        assertThat(a.available()).isFalse();
        assertThat(a.reason()).isEqualTo("ORBITKV_MOONCAKE_LIB is not set and transfer.mooncake.library is not configured: point either at a"
                + " built libtransfer_engine.so (docs/mooncake.md says how to build it)");
        MooncakeTransportProvider p = new MooncakeTransportProvider(configured -> MooncakeEngine.load(configured, null));
        assertThat(p.unavailableReason()).contains(a.reason());
        assertThatThrownBy(() -> p.open("w", null, Map.of("protocol", "tcp"))).isInstanceOf(MooncakeUnavailableException.class)
                .hasMessage("transport mooncake is unavailable: " + a.reason());
    }

    @Test
    void aMissingFileIsNamed() {
        MooncakeTransportProvider p = new MooncakeTransportProvider(configured -> MooncakeEngine.load(configured, "/nonexistent/libtransfer_engine.so"));
        assertThat(p.unavailableReason()).contains("cannot load /nonexistent/libtransfer_engine.so: no such file");
        // The setting wins over the environment.
        assertThatThrownBy(() -> p.open("w", null, Map.of("library", "/elsewhere/libtransfer_engine.so")))
                .hasMessage("transport mooncake is unavailable: cannot load /elsewhere/libtransfer_engine.so: no such file");
    }

    @Test
    void aFileTheLoaderRefusesIsNamedWithTheLoadersError(@TempDir Path dir) throws Exception {
        Path notElf = Files.writeString(dir.resolve("libtransfer_engine.so"), "not a shared object\n".repeat(200));
        MooncakeEngine.Availability a = MooncakeEngine.load(notElf);
        assertThat(a.available()).isFalse();
        assertThat(a.reason()).startsWith("cannot load " + notElf + ": dlopen: ").contains(notElf.toString()).containsIgnoringCase("ELF");
        assertThatThrownBy(a::orElseThrow).isInstanceOf(MooncakeUnavailableException.class).hasMessage(a.reason());
    }

    @Test
    void aLibraryWithoutTheEntryPointsIsNotTakenForTheEngine() {
        Path other = Path.of(System.getProperty("java.home"), "lib", "libnet.so");
        MooncakeEngine.Availability a = MooncakeEngine.load(other);
        assertThat(a.available()).isFalse();
        assertThat(a.reason()).isEqualTo(other.toAbsolutePath().normalize() + " is not a Mooncake transfer engine library: it has no"
                + " createTransferEngine (build the transfer_engine target of kvcache-ai/Mooncake, see docs/mooncake.md)");
    }
}
