package io.orbitkv.pd.proxy.routing;

import io.orbitkv.pd.events.EngineRole;

/**
 * An engine the proxy may route to.
 *
 * @param engineId the engine's id
 * @param role     prefill, decode or both
 * @param httpUrl  its OpenAI-compatible base URL
 * @param inFlight requests the decider counts as in flight on it (0 when unknown)
 * @param model    the model it serves as registered, or null when unknown (a statically configured engine)
 */
public record EngineInfo(String engineId, EngineRole role, String httpUrl, long inFlight, String model) {

    /** An engine whose model is not known (it is taken to serve any). */
    public EngineInfo(String engineId, EngineRole role, String httpUrl, long inFlight) {
        this(engineId, role, httpUrl, inFlight, null);
    }

    /** Whether it may serve a request for {@code requested} (null or blank: any model). */
    public boolean serves(String requested) {
        return requested == null || requested.isBlank() || model == null || model.isBlank() || model.equals(requested);
    }

    public boolean canPrefill() {
        return role == EngineRole.PREFILL || role == EngineRole.BOTH;
    }

    public boolean canDecode() {
        return role == EngineRole.DECODE || role == EngineRole.BOTH;
    }
}
