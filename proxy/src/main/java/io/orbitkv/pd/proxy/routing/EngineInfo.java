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
 * @param hashing  how it hashes its prefix-cache blocks as registered, or null when it did not say
 */
public record EngineInfo(String engineId, EngineRole role, String httpUrl, long inFlight, String model, Hashing hashing) {

    /**
     * An engine's block hashing ({@code EngineRegistration.block_hash_algorithm} / {@code .block_hash_seed} and its
     * layout's block size): a router must hash a prompt the same way to find what the engine caches.
     */
    public record Hashing(String algorithm, String seed, int blockSize) {
        @Override
        public String toString() {
            return algorithm + "/seed=" + seed + "/" + blockSize + " tokens";
        }
    }

    /** An engine whose block hashing is not known. */
    public EngineInfo(String engineId, EngineRole role, String httpUrl, long inFlight, String model) {
        this(engineId, role, httpUrl, inFlight, model, null);
    }

    /** An engine whose model is not known (it is taken to serve any). */
    public EngineInfo(String engineId, EngineRole role, String httpUrl, long inFlight) {
        this(engineId, role, httpUrl, inFlight, null, null);
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
