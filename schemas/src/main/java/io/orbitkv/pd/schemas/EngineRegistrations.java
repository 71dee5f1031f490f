package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.KvLayout;

/**
 * The rules every reader of the engines table applies before a registration replaces the one it has (decider, workers,
 * proxy through the decider): the record is keyed by the engine it names, its layout is a valid page shape, and its
 * instance epoch is not older than the one already taken — an older epoch never replaces a newer one (a forged or
 * replayed record must not take an engine away from the table).
 */
public final class EngineRegistrations {

    /** Why a registration was refused: {@code errorType} as on the dead-letter topic, {@code reason} for a user. */
    public record Refusal(String errorType, String reason) { }

    private EngineRegistrations() { }

    /**
     * Null when {@code r}, read under {@code key}, may replace {@code current} (null: none yet); else why not.
     */
    public static Refusal check(String key, EngineRegistration r, EngineRegistration current) {
        if (key == null || !key.equals(r.getEngineId())) {
            return new Refusal("KEY_MISMATCH", "registration keyed '" + key + "' names engine '" + r.getEngineId()
                    + "': the engines topic is keyed by engine id");
        }
        String bad = layoutProblem(r.getLayout());
        if (bad != null) {
            return new Refusal("OUT_OF_BOUNDS", "registration of " + key + " has an invalid layout: " + bad);
        }
        if (current != null && r.getInstanceEpoch() < current.getInstanceEpoch()) {
            return new Refusal("STALE_EPOCH", "registration of " + key + " at instance epoch " + r.getInstanceEpoch()
                    + " is older than the one taken (" + current.getInstanceEpoch() + "): an older epoch never replaces a newer one");
        }
        return null;
    }

    /** Null when {@code l} is a usable page shape; else what is wrong (shared by the decider's checks of facts). */
    public static String layoutProblem(KvLayout l) {
        if (l == null) {
            return "layout missing";
        }
        if (l.getNumLayers() < 1 || l.getBlockSizeTokens() < 1 || l.getNumKvHeads() < 1 || l.getHeadDim() < 1
                || l.getPageBytes() < 1 || l.getNumBlocks() < 1 || l.getTpSize() < 1 || l.getTpRank() < 0 || l.getTpRank() >= l.getTpSize()) {
            return "num_layers, block_size_tokens, num_kv_heads, head_dim, page_bytes, num_blocks and tp_size must be positive"
                    + " and 0 <= tp_rank < tp_size";
        }
        return null;
    }
}
