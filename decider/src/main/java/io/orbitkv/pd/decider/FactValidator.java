package io.orbitkv.pd.decider;

import io.orbitkv.pd.decider.RequestStateMachine.Rejection;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.schemas.EngineRegistrations;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * The decider's checks of what facts report, before anything is decided on them: a fact's own fields (engine ids and
 * token counts of an admission; the layout and page runs a prefill or decode engine reports) before it may change a
 * request's state at all, and whether the two engines' pages fit each other before an order may name both.
 * Stateless apart from the policy's run limit.
 */
final class FactValidator {

    private final int maxRuns;

    FactValidator(int maxRuns) {
        this.maxRuns = maxRuns;
    }

    /**
     * Null when the fact is well-formed; else why it goes to the dead-letter topic ({@code OVERSIZED} for more runs or
     * blocks than allowed, {@code OUT_OF_BOUNDS} for anything else). A malformed fact changes nothing.
     */
    Rejection check(Object fact) {
        String invalid = switch (fact) {
            case RequestAdmitted a -> a.getPrefillEngineId().isEmpty() || a.getDecodeEngineId().isEmpty()
                    ? "RequestAdmitted: prefill_engine_id and decode_engine_id must be set"
                    : a.getPromptTokens() < 0 || a.getMaxTokens() < 0 ? "RequestAdmitted: negative token counts" : null;
            case PrefillCompleted pc -> pages("PrefillCompleted.source_blocks", pc.getSourceBlocks(), pc.getLayout());
            case DecodeReady dr -> dr.getCachedBlocks() < 0 || (!dr.getDestBlocks().isEmpty() && dr.getCachedBlocks() >= BlockRuns.totalBlocks(dr.getDestBlocks()))
                    ? "DecodeReady.cached_blocks: must be >= 0 and less than dest_blocks' " + BlockRuns.totalBlocks(dr.getDestBlocks())
                    + " blocks (at least one block moves), got " + dr.getCachedBlocks()
                    : pages("DecodeReady.dest_blocks", dr.getDestBlocks(), dr.getLayout());
            default -> null;
        };
        return invalid == null ? null : new Rejection(invalid.startsWith("oversized") ? "OVERSIZED" : "OUT_OF_BOUNDS", invalid);
    }

    private String pages(String field, List<BlockRun> runs, KvLayout layout) {
        if (layout == null) {
            return field.substring(0, field.indexOf('.')) + ".layout: required by the decider, missing";
        }
        String bad = EngineRegistrations.layoutProblem(layout);
        if (bad != null) {
            return field.substring(0, field.indexOf('.')) + ".layout: " + bad;
        }
        if (runs.isEmpty()) {
            return field + ": no blocks";
        }
        if (runs.size() > maxRuns) {
            return "oversized " + field + ": " + runs.size() + " runs, more than decider.max-runs=" + maxRuns;
        }
        long total = 0;
        for (BlockRun r : runs) {
            if (r.getStart() < 0 || r.getCount() < 1 || (long) r.getStart() + r.getCount() > layout.getNumBlocks()) {
                return field + ": run " + r.getStart() + "+" + r.getCount() + " outside the pool of " + layout.getNumBlocks() + " blocks";
            }
            total += r.getCount();
        }
        if (total > layout.getNumBlocks()) {
            return "oversized " + field + ": " + total + " blocks in a pool of " + layout.getNumBlocks();
        }
        List<BlockRun> sorted = new ArrayList<>(runs);
        sorted.sort(Comparator.comparingInt(BlockRun::getStart));
        for (int i = 1; i < sorted.size(); i++) {
            BlockRun prev = sorted.get(i - 1);
            if (prev.getStart() + prev.getCount() > sorted.get(i).getStart()) {
                return field + ": runs " + prev.getStart() + "+" + prev.getCount() + " and " + sorted.get(i).getStart() + "+"
                        + sorted.get(i).getCount() + " overlap";
            }
        }
        return null;
    }

    /**
     * Null when the request's reported source pages can be copied page for page into its destination pages (the KV
     * model's layout comparison, {@link KvGeometry#incompatibility(KvLayout, String, KvLayout, String)}, and as many
     * blocks on both sides); else why not.
     */
    static String misfit(DeciderState s) {
        HeldPages src = s.getSource();
        HeldPages dst = s.getDest();
        String mismatch = KvGeometry.incompatibility(src.getLayout(), "prefill", dst.getLayout(), "decode");
        long srcBlocks = BlockRuns.totalBlocks(src.getBlocks());
        long dstBlocks = BlockRuns.totalBlocks(dst.getBlocks());
        if (mismatch == null && srcBlocks != dstBlocks) {
            mismatch = "source holds " + srcBlocks + " blocks, destination " + dstBlocks;
        }
        return mismatch;
    }
}
