package io.orbitkv.pd.mooncake;

import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.mooncake.te.MooncakeUnavailableException;
import io.orbitkv.pd.mooncake.te.NativeTransferEngine;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.KvTransportProvider;
import io.orbitkv.pd.transport.PushGate;
import java.util.Map;
import java.util.Optional;
import java.util.function.Function;

/**
 * Makes the {@code mooncake} transport findable by name ({@code KvTransportProvider.find("mooncake")}, registered in
 * {@code META-INF/services}). Nothing native is loaded until it is asked for; without the library the transport is
 * unavailable with the reason and everything else runs.
 */
public final class MooncakeTransportProvider implements KvTransportProvider {

    private final Function<String, MooncakeEngine.Availability> loader;

    /** The provider ServiceLoader makes: the library from {@code transfer.mooncake.library} or {@value MooncakeEngine#LIBRARY_ENV}. */
    public MooncakeTransportProvider() {
        this(MooncakeEngine::load);
    }

    /** A provider with another library source (tests exercise the unavailable paths with it). */
    public MooncakeTransportProvider(Function<String, MooncakeEngine.Availability> loader) {
        this.loader = loader;
    }

    @Override
    public String name() {
        return MooncakeTransport.NAME;
    }

    /** Why the library from {@value MooncakeEngine#LIBRARY_ENV} cannot be used here, if it cannot. */
    @Override
    public Optional<String> unavailableReason() {
        MooncakeEngine.Availability a = loader.apply(null);
        return a.available() ? Optional.empty() : Optional.of(a.reason());
    }

    /**
     * @throws MooncakeUnavailableException {@code transport mooncake is unavailable: <why>} when the library is missing
     */
    @Override
    public KvTransport open(String workerId, PushGate gate, Map<String, String> settings) {
        MooncakeConfig config = MooncakeConfig.parse(settings);
        MooncakeEngine.Availability a = loader.apply(config.library());
        if (!a.available()) {
            throw new MooncakeUnavailableException("transport mooncake is unavailable: " + a.reason());
        }
        NativeTransferEngine engine = NativeTransferEngine.start(a.orElseThrow(), new NativeTransferEngine.Options(config.protocol(),
                config.metadata(), config.host(), config.nicPriorityMatrix(), config.location()));
        return MooncakeTransport.start(config, engine, workerId, gate);
    }
}
