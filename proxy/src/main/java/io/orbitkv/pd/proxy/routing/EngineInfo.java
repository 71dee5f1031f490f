package io.orbitkv.pd.proxy.routing;

import io.orbitkv.pd.events.EngineRole;

/**
 * An engine the proxy may route to.
 *
 * @param engineId the engine's id
 * @param role     prefill, decode or both
 * @param httpUrl  its OpenAI-compatible base URL
 * @param inFlight requests the decider counts as in flight on it (0 when unknown)
 */
public record EngineInfo(String engineId, EngineRole role, String httpUrl, long inFlight) {

    public boolean canPrefill() {
        return role == EngineRole.PREFILL || role == EngineRole.BOTH;
    }

    public boolean canDecode() {
        return role == EngineRole.DECODE || role == EngineRole.BOTH;
    }
}
