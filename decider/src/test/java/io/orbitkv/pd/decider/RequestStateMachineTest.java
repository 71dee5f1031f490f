package io.orbitkv.pd.decider;

import static io.orbitkv.pd.decider.Facts.*;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

import io.orbitkv.pd.decider.RequestStateMachine.Emit;
import io.orbitkv.pd.decider.RequestStateMachine.Step;
import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.Phase;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every {@link Phase} × every input (each payload type of the RequestEvent union, both kinds of TransferFailed,
 * an engine restart on either side, and a due timer) through the pure {@link RequestStateMachine}, checked
 * against a total expectation table: resulting phase, decisions emitted, dead-letter verdict.
 *
 * <p>Representative states are built by replaying a fact prefix (fast policy: prefill/decode-ready 2 s,
 * transfer 1 s, lease 3 s, admission grace 1 s, drain 500 ms, retention 30 s, 3 attempts, 100 ms backoff).
 * The state's pages are prefill-0 run 0+4 and decode-0 run 100+4 (lease epoch 1); the PrefillCompleted and
 * DecodeReady inputs report <em>other</em> pages (200+4 and 300+4), so in a terminal phase they are new page sets.
 *
 * <p>Rows tagged {@code BUG-n} describe the intended behaviour where the current code differs (see the report /
 * the dedicated tests at the bottom).
 */
class RequestStateMachineTest {

    private static final String R = "r";
    private static final DeciderPolicy POLICY = fastPolicy();

    /** The inputs of the cross product. */
    enum Input {
        ADMITTED, PREFILL_COMPLETED, PREFILL_FAILED, DECODE_READY, DECODE_REJECTED, HEARTBEAT, TRANSFER_STARTED,
        TRANSFER_COMPLETED, TRANSFER_FAILED_RETRIABLE, TRANSFER_FAILED_FATAL, DECODE_COMPLETED, CANCEL, EPOCH_DECODE,
        EPOCH_PREFILL, TICK, TIMER
    }

    /** A state reached by replaying facts; {@code now} is the stream time of the last fact. */
    record Built(DeciderState state, long now, RequestEvent last) { }

    // ------------------------------------------------------------------------------------------------ states

    private static Built replay(RequestStateMachine m, Object... steps) {
        DeciderState s = null;
        long now = 0;
        RequestEvent last = null;
        for (int i = 0; i < steps.length; i += 2) {
            now = (Long) steps[i];
            if (steps[i + 1] instanceof RequestEvent e) {
                last = e;
            }
            Step st = steps[i + 1] instanceof RequestEvent e ? m.onEvent(s, e, now) : m.onTimer(s, now);
            assertThat(st.rejection()).as("prefix step %s", steps[i + 1]).isNull();
            s = st.state();
        }
        return new Built(s, now, last);
    }

    private static final Object TIMER = "timer";

    static Built build(Phase p) {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = switch (p) {
            case AWAITING_ADMISSION -> replay(m, 1000L, prefillCompleted(R, run(0, 4)));
            case ADMITTED -> replay(m, 1000L, admitted(R));
            case PREFILL_DONE -> replay(m, 1000L, admitted(R), 1001L, prefillCompleted(R, run(0, 4)));
            case DECODE_READY -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)));
            case TRANSFERRING -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)));
            case RETRY_WAIT -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)),
                    1003L, failed(R, 1, true));
            case KV_READY -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)),
                    1003L, completed(R, 1));
            case RECOMPUTING -> replay(m, 1000L, admitted(R, FailurePolicy.RECOMPUTE), 1001L, decodeReady(R, run(100, 4)),
                    1002L, prefillCompleted(R, run(0, 4)), 1003L, failed(R, 1, false));
            case COMPLETED -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)),
                    1003L, completed(R, 1), 1004L, decodeCompleted(R));
            // cancelled mid-transfer: the aborted attempt is still open and both releases wait for the drain
            case CANCELLED -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)),
                    1003L, cancel(R));
            case TIMED_OUT -> replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 3000L, TIMER);
            case FAILED -> replay(m, 1000L, admitted(R), 1001L, prefillCompleted(R, run(0, 4)), 1002L, decodeRejected(R));
        };
        assertThat(b.state().getPhase()).as("representative state of %s", p).isEqualTo(p);
        return b;
    }

    private static RequestEvent input(Input in) {
        return switch (in) {
            case ADMITTED -> admitted(R);
            case PREFILL_COMPLETED -> prefillCompleted(R, run(200, 4));
            case PREFILL_FAILED -> prefillFailed(R);
            case DECODE_READY -> decodeReady(R, run(300, 4));
            case DECODE_REJECTED -> decodeRejected(R);
            case HEARTBEAT -> heartbeat(R, 1, 1_000_000);
            case TRANSFER_STARTED -> started(R, 1);
            case TRANSFER_COMPLETED -> completed(R, 1);
            case TRANSFER_FAILED_RETRIABLE -> failed(R, 1, true);
            case TRANSFER_FAILED_FATAL -> failed(R, 1, false);
            case DECODE_COMPLETED -> decodeCompleted(R);
            case CANCEL -> cancel(R);
            case EPOCH_DECODE -> epochChanged(R, DECODE, 2);
            case EPOCH_PREFILL -> epochChanged(R, PREFILL, 2);
            case TICK -> event(R, io.orbitkv.pd.events.Tick.newBuilder().setPartition(0).build());
            case TIMER -> null;
        };
    }

    // ------------------------------------------------------------------------------------------------ table

    /**
     * phase | input | resulting phase (GONE = state deleted) | decisions (- = none) | dead letter (- = none) | note.
     * Decision codes: Order, Abort, RelP / RelD (ReleaseDecided PREFILL / DECODE), KvReady, Recompute, Rejected
     * (InputRejected), Outcome:KIND.
     */
    private static final String TABLE = """
            AWAITING_ADMISSION | ADMITTED                  | PREFILL_DONE       | -                        | -
            AWAITING_ADMISSION | PREFILL_COMPLETED         | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | PREFILL_FAILED            | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | DECODE_READY              | AWAITING_ADMISSION | -                        | -
            AWAITING_ADMISSION | DECODE_REJECTED           | AWAITING_ADMISSION | -                        | -
            AWAITING_ADMISSION | HEARTBEAT                 | AWAITING_ADMISSION | Rejected                 | STALE_LEASE
            AWAITING_ADMISSION | TRANSFER_STARTED          | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | TRANSFER_COMPLETED        | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | TRANSFER_FAILED_RETRIABLE | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | TRANSFER_FAILED_FATAL     | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | DECODE_COMPLETED          | AWAITING_ADMISSION | Rejected                 | ILLEGAL_TRANSITION
            AWAITING_ADMISSION | CANCEL                    | AWAITING_ADMISSION | -                        | -
            AWAITING_ADMISSION | EPOCH_DECODE              | AWAITING_ADMISSION | -                        | -
            AWAITING_ADMISSION | EPOCH_PREFILL             | AWAITING_ADMISSION | RelP                     | -     | BUG-1
            AWAITING_ADMISSION | TICK                      | AWAITING_ADMISSION | -                        | -
            AWAITING_ADMISSION | TIMER                     | FAILED             | Rejected,RelP,Outcome:FAILED | -

            ADMITTED | ADMITTED                  | ADMITTED  | Rejected          | ILLEGAL_TRANSITION
            ADMITTED | PREFILL_COMPLETED         | PREFILL_DONE | -              | -
            ADMITTED | PREFILL_FAILED            | FAILED    | Outcome:FAILED    | -
            ADMITTED | DECODE_READY              | DECODE_READY | -              | -
            ADMITTED | DECODE_REJECTED           | FAILED    | Outcome:FAILED    | -
            ADMITTED | HEARTBEAT                 | ADMITTED  | Rejected          | STALE_LEASE
            ADMITTED | TRANSFER_STARTED          | ADMITTED  | Rejected          | ILLEGAL_TRANSITION
            ADMITTED | TRANSFER_COMPLETED        | ADMITTED  | Rejected          | ILLEGAL_TRANSITION
            ADMITTED | TRANSFER_FAILED_RETRIABLE | ADMITTED  | Rejected          | ILLEGAL_TRANSITION
            ADMITTED | TRANSFER_FAILED_FATAL     | ADMITTED  | Rejected          | ILLEGAL_TRANSITION
            ADMITTED | DECODE_COMPLETED          | ADMITTED  | Rejected          | ILLEGAL_TRANSITION
            ADMITTED | CANCEL                    | CANCELLED | Outcome:CANCELLED | -
            ADMITTED | EPOCH_DECODE              | ADMITTED  | -                 | -
            ADMITTED | EPOCH_PREFILL             | ADMITTED  | -                 | -
            ADMITTED | TICK                      | ADMITTED  | -                 | -
            ADMITTED | TIMER                     | TIMED_OUT | Outcome:TIMED_OUT | -

            PREFILL_DONE | ADMITTED                  | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | PREFILL_COMPLETED         | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | PREFILL_FAILED            | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | DECODE_READY              | TRANSFERRING | Order                  | -
            PREFILL_DONE | DECODE_REJECTED           | FAILED       | RelP,Outcome:FAILED    | -
            PREFILL_DONE | HEARTBEAT                 | PREFILL_DONE | Rejected               | STALE_LEASE
            PREFILL_DONE | TRANSFER_STARTED          | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | TRANSFER_COMPLETED        | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | TRANSFER_FAILED_RETRIABLE | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | TRANSFER_FAILED_FATAL     | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | DECODE_COMPLETED          | PREFILL_DONE | Rejected               | ILLEGAL_TRANSITION
            PREFILL_DONE | CANCEL                    | CANCELLED    | RelP,Outcome:CANCELLED | -
            PREFILL_DONE | EPOCH_DECODE              | PREFILL_DONE | -                      | -
            PREFILL_DONE | EPOCH_PREFILL             | FAILED       | RelP,Outcome:FAILED    | -
            PREFILL_DONE | TICK                      | PREFILL_DONE | -                      | -
            PREFILL_DONE | TIMER                     | TIMED_OUT    | RelP,Outcome:TIMED_OUT | -

            DECODE_READY | ADMITTED                  | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | PREFILL_COMPLETED         | TRANSFERRING | Order                  | -
            DECODE_READY | PREFILL_FAILED            | FAILED       | RelD,Outcome:FAILED    | -
            DECODE_READY | DECODE_READY              | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | DECODE_REJECTED           | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | HEARTBEAT                 | DECODE_READY | -                      | -
            DECODE_READY | TRANSFER_STARTED          | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | TRANSFER_COMPLETED        | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | TRANSFER_FAILED_RETRIABLE | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | TRANSFER_FAILED_FATAL     | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | DECODE_COMPLETED          | DECODE_READY | Rejected               | ILLEGAL_TRANSITION
            DECODE_READY | CANCEL                    | CANCELLED    | RelD,Outcome:CANCELLED | -
            DECODE_READY | EPOCH_DECODE              | FAILED       | RelD,Outcome:FAILED    | -
            DECODE_READY | EPOCH_PREFILL             | DECODE_READY | -                      | -
            DECODE_READY | TICK                      | DECODE_READY | -                      | -
            DECODE_READY | TIMER                     | TIMED_OUT    | RelD,Outcome:TIMED_OUT | -

            TRANSFERRING | ADMITTED                  | TRANSFERRING | Rejected                 | ILLEGAL_TRANSITION
            TRANSFERRING | PREFILL_COMPLETED         | TRANSFERRING | Rejected                 | ILLEGAL_TRANSITION
            TRANSFERRING | PREFILL_FAILED            | TRANSFERRING | Rejected                 | ILLEGAL_TRANSITION
            TRANSFERRING | DECODE_READY              | TRANSFERRING | Rejected                 | ILLEGAL_TRANSITION
            TRANSFERRING | DECODE_REJECTED           | TRANSFERRING | Rejected                 | ILLEGAL_TRANSITION
            TRANSFERRING | HEARTBEAT                 | TRANSFERRING | -                        | -
            TRANSFERRING | TRANSFER_STARTED          | TRANSFERRING | -                        | -
            TRANSFERRING | TRANSFER_COMPLETED        | KV_READY     | KvReady,RelP             | -
            TRANSFERRING | TRANSFER_FAILED_RETRIABLE | RETRY_WAIT   | -                        | -
            TRANSFERRING | TRANSFER_FAILED_FATAL     | FAILED       | RelP,RelD,Outcome:FAILED | -
            TRANSFERRING | DECODE_COMPLETED          | TRANSFERRING | -                        | -
            TRANSFERRING | CANCEL                    | CANCELLED    | Abort,Outcome:CANCELLED  | -
            TRANSFERRING | EPOCH_DECODE              | FAILED       | RelD,Abort,Outcome:FAILED | -
            TRANSFERRING | EPOCH_PREFILL             | FAILED       | RelP,Abort,Outcome:FAILED | -   | BUG-2
            TRANSFERRING | TICK                      | TRANSFERRING | -                        | -
            TRANSFERRING | TIMER                     | RETRY_WAIT   | Abort                    | -

            RETRY_WAIT | ADMITTED                  | RETRY_WAIT | Rejected                 | ILLEGAL_TRANSITION
            RETRY_WAIT | PREFILL_COMPLETED         | RETRY_WAIT | Rejected                 | ILLEGAL_TRANSITION
            RETRY_WAIT | PREFILL_FAILED            | RETRY_WAIT | Rejected                 | ILLEGAL_TRANSITION
            RETRY_WAIT | DECODE_READY              | RETRY_WAIT | Rejected                 | ILLEGAL_TRANSITION
            RETRY_WAIT | DECODE_REJECTED           | RETRY_WAIT | Rejected                 | ILLEGAL_TRANSITION
            RETRY_WAIT | HEARTBEAT                 | RETRY_WAIT | -                        | -
            RETRY_WAIT | TRANSFER_STARTED          | RETRY_WAIT | -                        | -
            RETRY_WAIT | TRANSFER_COMPLETED        | KV_READY   | KvReady,RelP             | -
            RETRY_WAIT | TRANSFER_FAILED_RETRIABLE | RETRY_WAIT | -                        | -
            RETRY_WAIT | TRANSFER_FAILED_FATAL     | RETRY_WAIT | -                        | -
            RETRY_WAIT | DECODE_COMPLETED          | RETRY_WAIT | -                        | -
            RETRY_WAIT | CANCEL                    | CANCELLED  | RelP,RelD,Outcome:CANCELLED | -
            RETRY_WAIT | EPOCH_DECODE              | FAILED     | RelD,RelP,Outcome:FAILED | -
            RETRY_WAIT | EPOCH_PREFILL             | FAILED     | RelP,RelD,Outcome:FAILED | -
            RETRY_WAIT | TICK                      | RETRY_WAIT | -                        | -
            RETRY_WAIT | TIMER                     | TRANSFERRING | Order                  | -

            KV_READY | ADMITTED                  | KV_READY  | Rejected               | ILLEGAL_TRANSITION
            KV_READY | PREFILL_COMPLETED         | KV_READY  | Rejected               | ILLEGAL_TRANSITION
            KV_READY | PREFILL_FAILED            | KV_READY  | Rejected               | ILLEGAL_TRANSITION
            KV_READY | DECODE_READY              | KV_READY  | Rejected               | ILLEGAL_TRANSITION
            KV_READY | DECODE_REJECTED           | KV_READY  | Rejected               | ILLEGAL_TRANSITION
            KV_READY | HEARTBEAT                 | KV_READY  | -                      | -
            KV_READY | TRANSFER_STARTED          | KV_READY  | -                      | -
            KV_READY | TRANSFER_COMPLETED        | KV_READY  | -                      | -
            KV_READY | TRANSFER_FAILED_RETRIABLE | KV_READY  | -                      | -
            KV_READY | TRANSFER_FAILED_FATAL     | KV_READY  | -                      | -
            KV_READY | DECODE_COMPLETED          | COMPLETED | RelD,Outcome:COMPLETED | -
            KV_READY | CANCEL                    | CANCELLED | RelD,Outcome:CANCELLED | -
            KV_READY | EPOCH_DECODE              | FAILED    | RelD,Outcome:FAILED    | -
            KV_READY | EPOCH_PREFILL             | KV_READY  | -                      | -
            KV_READY | TICK                      | KV_READY  | -                      | -
            KV_READY | TIMER                     | TIMED_OUT | RelD,Outcome:TIMED_OUT | -

            RECOMPUTING | ADMITTED                  | RECOMPUTING | Rejected               | ILLEGAL_TRANSITION
            RECOMPUTING | PREFILL_COMPLETED         | RECOMPUTING | Rejected               | ILLEGAL_TRANSITION
            RECOMPUTING | PREFILL_FAILED            | RECOMPUTING | Rejected               | ILLEGAL_TRANSITION
            RECOMPUTING | DECODE_READY              | RECOMPUTING | Rejected               | ILLEGAL_TRANSITION
            RECOMPUTING | DECODE_REJECTED           | RECOMPUTING | Rejected               | ILLEGAL_TRANSITION
            RECOMPUTING | HEARTBEAT                 | RECOMPUTING | -                      | -
            RECOMPUTING | TRANSFER_STARTED          | RECOMPUTING | -                      | -
            RECOMPUTING | TRANSFER_COMPLETED        | RECOMPUTING | -                      | -
            RECOMPUTING | TRANSFER_FAILED_RETRIABLE | RECOMPUTING | -                      | -
            RECOMPUTING | TRANSFER_FAILED_FATAL     | RECOMPUTING | -                      | -
            RECOMPUTING | DECODE_COMPLETED          | COMPLETED   | RelD,Outcome:COMPLETED | -
            RECOMPUTING | CANCEL                    | CANCELLED   | RelD,Outcome:CANCELLED | -
            RECOMPUTING | EPOCH_DECODE              | FAILED      | RelD,Outcome:FAILED    | -
            RECOMPUTING | EPOCH_PREFILL             | RECOMPUTING | -                      | -
            RECOMPUTING | TICK                      | RECOMPUTING | -                      | -
            RECOMPUTING | TIMER                     | TIMED_OUT   | RelD,Outcome:TIMED_OUT | -

            COMPLETED | ADMITTED                  | COMPLETED | Rejected | ILLEGAL_TRANSITION
            COMPLETED | PREFILL_COMPLETED         | COMPLETED | RelP     | -
            COMPLETED | PREFILL_FAILED            | COMPLETED | -        | -
            COMPLETED | DECODE_READY              | COMPLETED | RelD     | -
            COMPLETED | DECODE_REJECTED           | COMPLETED | -        | -
            COMPLETED | HEARTBEAT                 | COMPLETED | -        | -
            COMPLETED | TRANSFER_STARTED          | COMPLETED | -        | -
            COMPLETED | TRANSFER_COMPLETED        | COMPLETED | -        | -
            COMPLETED | TRANSFER_FAILED_RETRIABLE | COMPLETED | -        | -
            COMPLETED | TRANSFER_FAILED_FATAL     | COMPLETED | -        | -
            COMPLETED | DECODE_COMPLETED          | COMPLETED | -        | -
            COMPLETED | CANCEL                    | COMPLETED | Rejected | -
            COMPLETED | EPOCH_DECODE              | COMPLETED | -        | -
            COMPLETED | EPOCH_PREFILL             | COMPLETED | -        | -
            COMPLETED | TICK                      | COMPLETED | -        | -
            COMPLETED | TIMER                     | GONE      | -        | -

            CANCELLED | ADMITTED                  | CANCELLED | Rejected  | ILLEGAL_TRANSITION
            CANCELLED | PREFILL_COMPLETED         | CANCELLED | RelP      | -    | BUG-3
            CANCELLED | PREFILL_FAILED            | CANCELLED | -         | -
            CANCELLED | DECODE_READY              | CANCELLED | RelD      | -
            CANCELLED | DECODE_REJECTED           | CANCELLED | -         | -
            CANCELLED | HEARTBEAT                 | CANCELLED | -         | -
            CANCELLED | TRANSFER_STARTED          | CANCELLED | -         | -
            CANCELLED | TRANSFER_COMPLETED        | CANCELLED | RelP,RelD | -
            CANCELLED | TRANSFER_FAILED_RETRIABLE | CANCELLED | RelP,RelD | -
            CANCELLED | TRANSFER_FAILED_FATAL     | CANCELLED | RelP,RelD | -
            CANCELLED | DECODE_COMPLETED          | CANCELLED | -         | -
            CANCELLED | CANCEL                    | CANCELLED | Rejected  | -
            CANCELLED | EPOCH_DECODE              | CANCELLED | RelD      | -
            CANCELLED | EPOCH_PREFILL             | CANCELLED | RelP      | -
            CANCELLED | TICK                      | CANCELLED | -         | -
            CANCELLED | TIMER                     | CANCELLED | -         | -    | the aborted attempt never reported: its drain ends, the releases wait for its report (or twice the lease)

            TIMED_OUT | ADMITTED                  | TIMED_OUT | Rejected | ILLEGAL_TRANSITION
            TIMED_OUT | PREFILL_COMPLETED         | TIMED_OUT | RelP     | -
            TIMED_OUT | PREFILL_FAILED            | TIMED_OUT | -        | -
            TIMED_OUT | DECODE_READY              | TIMED_OUT | RelD     | -
            TIMED_OUT | DECODE_REJECTED           | TIMED_OUT | -        | -
            TIMED_OUT | HEARTBEAT                 | TIMED_OUT | -        | -
            TIMED_OUT | TRANSFER_STARTED          | TIMED_OUT | Rejected | ILLEGAL_TRANSITION
            TIMED_OUT | TRANSFER_COMPLETED        | TIMED_OUT | Rejected | ILLEGAL_TRANSITION
            TIMED_OUT | TRANSFER_FAILED_RETRIABLE | TIMED_OUT | Rejected | ILLEGAL_TRANSITION
            TIMED_OUT | TRANSFER_FAILED_FATAL     | TIMED_OUT | Rejected | ILLEGAL_TRANSITION
            TIMED_OUT | DECODE_COMPLETED          | TIMED_OUT | -        | -
            TIMED_OUT | CANCEL                    | TIMED_OUT | Rejected | -
            TIMED_OUT | EPOCH_DECODE              | TIMED_OUT | -        | -
            TIMED_OUT | EPOCH_PREFILL             | TIMED_OUT | -        | -
            TIMED_OUT | TICK                      | TIMED_OUT | -        | -
            TIMED_OUT | TIMER                     | GONE      | -        | -

            FAILED | ADMITTED                  | FAILED | Rejected | ILLEGAL_TRANSITION
            FAILED | PREFILL_COMPLETED         | FAILED | RelP     | -
            FAILED | PREFILL_FAILED            | FAILED | -        | -
            FAILED | DECODE_READY              | FAILED | RelD     | -
            FAILED | DECODE_REJECTED           | FAILED | -        | -
            FAILED | HEARTBEAT                 | FAILED | Rejected | STALE_LEASE
            FAILED | TRANSFER_STARTED          | FAILED | Rejected | ILLEGAL_TRANSITION
            FAILED | TRANSFER_COMPLETED        | FAILED | Rejected | ILLEGAL_TRANSITION
            FAILED | TRANSFER_FAILED_RETRIABLE | FAILED | Rejected | ILLEGAL_TRANSITION
            FAILED | TRANSFER_FAILED_FATAL     | FAILED | Rejected | ILLEGAL_TRANSITION
            FAILED | DECODE_COMPLETED          | FAILED | -        | -
            FAILED | CANCEL                    | FAILED | Rejected | -
            FAILED | EPOCH_DECODE              | FAILED | -        | -
            FAILED | EPOCH_PREFILL             | FAILED | -        | -
            FAILED | TICK                      | FAILED | -        | -
            FAILED | TIMER                     | GONE   | -        | -
            """;

    record Row(String phase, List<String> decisions, String deadLetter, String note) { }

    private static final Map<Phase, Map<Input, Row>> EXPECTED = parse();

    private static Map<Phase, Map<Input, Row>> parse() {
        Map<Phase, Map<Input, Row>> t = new EnumMap<>(Phase.class);
        for (String line : TABLE.lines().map(String::strip).filter(l -> !l.isEmpty()).toList()) {
            String[] f = Arrays.stream(line.split("\\|")).map(String::strip).toArray(String[]::new);
            Phase p = Phase.valueOf(f[0]);
            Input in = Input.valueOf(f[1]);
            List<String> ds = f[3].equals("-") ? List.of() : List.of(f[3].split(","));
            Row prev = t.computeIfAbsent(p, k -> new EnumMap<>(Input.class))
                    .put(in, new Row(f[2], ds, f[4].equals("-") ? null : f[4], f.length > 5 ? f[5] : ""));
            if (prev != null) {
                throw new IllegalStateException("duplicate row " + p + " × " + in);
            }
        }
        return t;
    }

    static Stream<Arguments> crossProduct() {
        List<Arguments> all = new ArrayList<>();
        for (Phase p : Phase.values()) {
            for (Input in : Input.values()) {
                all.add(Arguments.of(p, in));
            }
        }
        return all.stream();
    }

    private static String code(Emit e) {
        return switch (e.payload()) {
            case TransferOrder o -> "Order";
            case AbortTransfer a -> "Abort";
            case ReleaseDecided r -> r.getSide() == ReleaseSide.PREFILL ? "RelP" : "RelD";
            case KvReady k -> "KvReady";
            case RecomputeDecided r -> "Recompute";
            case InputRejected r -> "Rejected";
            case RequestOutcome o -> "Outcome:" + o.getKind();
            default -> e.payload().getClass().getSimpleName();
        };
    }

    @ParameterizedTest(name = "{0} × {1}")
    @MethodSource("crossProduct")
    void everyPhaseTimesEveryInput(Phase phase, Input input) {
        Row row = EXPECTED.getOrDefault(phase, Map.of()).get(input);
        if (row == null) {
            fail("the expectation table has no row for " + phase + " × " + input + ": add one");
        }
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = build(phase);
        long now;
        Step step;
        try {
            if (input == Input.TIMER) {
                now = m.nextDeadline(b.state());
                assertThat(now).as("a %s state always has a deadline", phase).isPositive();
                step = m.onTimer(b.state(), now);
            } else {
                now = b.now() + 10;
                step = m.onEvent(b.state(), input(input), now);
            }
        } catch (RuntimeException e) {
            throw new AssertionError(phase + " × " + input + " threw " + e + " " + row.note(), e);
        }
        String got = step.state() == null ? "GONE" : step.state().getPhase().name();
        List<String> codes = step.emits().stream().map(RequestStateMachineTest::code).toList();
        String dl = step.rejection() == null ? null : step.rejection().errorType();
        String desc = phase + " × " + input + (row.note().isEmpty() ? "" : " [" + row.note() + "]");
        assertThat(codes).as("decisions of %s", desc).isEqualTo(row.decisions());
        assertThat(got).as("phase after %s", desc).isEqualTo(row.phase());
        assertThat(dl).as("dead letter of %s", desc).isEqualTo(row.deadLetter());
        // every InputRejected names the input's type; an outcome only ever leaves a terminal phase
        if (codes.stream().anyMatch(c -> c.startsWith("Outcome:"))) {
            assertThat(RequestStateMachine.isTerminal(Phase.valueOf(got))).isTrue();
            assertThat(RequestStateMachine.isTerminal(phase)).as("no second outcome").isFalse();
        }
        if (RequestStateMachine.isTerminal(phase)) {
            assertThat(codes).as("no order after the outcome").doesNotContain("Order");
        }
    }

    @Test
    void theTableHasNoRowOutsideTheCrossProduct() {
        int rows = EXPECTED.values().stream().mapToInt(Map::size).sum();
        assertThat(rows).isEqualTo(Phase.values().length * Input.values().length);
    }

    @Test
    void duplicateOfAnAppliedFactIsIgnoredInEveryPhase() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        for (Phase p : Phase.values()) {
            Built b = build(p);
            Step s = m.onEvent(b.state(), b.last(), b.now() + 1);
            assertThat(s.emits()).as("duplicate in %s", p).isEmpty();
            assertThat(s.rejection()).isNull();
        }
    }

    // ------------------------------------------------------------------------------------------------ clocks

    /** A decode-ready fact stamped {@code eventTime} on its engine's clock, asking for a lease of {@code askedMs} on that clock. */
    private static RequestEvent decodeReadyAt(long eventTime, long askedMs) {
        RequestEvent e = decodeReady(R, run(100, 4));
        io.orbitkv.pd.events.DecodeReady dr = (io.orbitkv.pd.events.DecodeReady) e.getPayload();
        dr.setLeaseDeadlineMs(eventTime + askedMs);
        return RequestEvent.newBuilder(e).setEventTimeMs(eventTime).setPayload(dr).build();
    }

    /**
     * A lease is the duration the engine asked for, counted from the fact's time in the log (the broker's append time):
     * an engine whose clock is behind used to get a shorter lease than it holds itself to (it expired early at the
     * decider while the engine still used the pages), one whose clock is ahead a longer one than it asked for.
     */
    @Test
    void aLeaseIsTheAskedDurationCountedFromTheLogWhateverTheEnginesClock() {
        RequestStateMachine m = new RequestStateMachine(POLICY); // 3 s leases at most
        long now = 1_000_000;
        Built behind = replay(m, now, admitted(R), now, decodeReadyAt(now - 1_000, 3_000));
        assertThat(behind.state().getLeaseDeadlineMs()).as("engine clock 1 s behind, asking 3 s").isEqualTo(now + 3_000);
        Built ahead = replay(m, now, admitted(R), now, decodeReadyAt(now + 60_000, 2_000));
        assertThat(ahead.state().getLeaseDeadlineMs()).as("engine clock 60 s ahead, asking 2 s").isEqualTo(now + 2_000);
        Built greedy = replay(m, now, admitted(R), now, decodeReadyAt(now, 600_000));
        assertThat(greedy.state().getLeaseDeadlineMs()).as("asking more than decider.lease.duration").isEqualTo(now + 3_000);
        // a heartbeat from the clock that is behind extends by what it asks, from its own append time
        RequestEvent hb = RequestEvent.newBuilder(heartbeat(R, 1, now + 1_500 - 1_000 + 3_000)).setEventTimeMs(now + 1_500 - 1_000).build();
        Step s = m.onEvent(behind.state(), hb, now + 1_500);
        assertThat(s.state().getLeaseDeadlineMs()).isEqualTo(now + 1_500 + 3_000);
    }

    /**
     * An attempt's deadline grows with the bytes it moves: 1 GiB of KV on a 1 Gbit/s link takes ~9 s, which used to fail
     * against the fixed 10 s transfer timeout with the push's own overhead (bench links: every attempt of an 8K-token
     * prompt failed at 1 Gbit/s). Now it gets the timeout plus its bytes at decider.transfer.min-rate (50 MB/s).
     */
    @Test
    void aLargeTransferGetsTimeForItsBytes() {
        DeciderPolicy p = Facts.policy(); // 10 s transfer timeout, 30 s lease
        RequestStateMachine m = new RequestStateMachine(p.withOrderAhead(false));
        Built b = replay(m, 1000L, admitted(R), 1001L, prefillCompleted(R, run(0, 512)));
        Step s = m.onEvent(b.state(), decodeReady(R, run(0, 512)), 1002);
        TransferOrder order = (TransferOrder) payloads(s).stream().filter(x -> x instanceof TransferOrder).findFirst().orElseThrow();
        long bytes = 512L * 4 * 2 * 32768; // 128 MiB in the test layout
        assertThat(order.getDeadlineMs()).isEqualTo(1002 + 10_000 + bytes * 1000 / 50_000_000);
    }

    /** Move only what is missing: the decode engine's cached prefix is skipped on both sides, signed and timed as moved. */
    @Test
    void anOrderMovesOnlyTheBlocksAfterTheDecodeEnginesCachedPrefix() {
        RequestStateMachine m = new RequestStateMachine(Facts.policy().withOrderAhead(false));
        Built b = replay(m, 1000L, admitted(R), 1001L, prefillCompleted(R, run(0, 10)));
        RequestEvent ready = decodeReady(R, run(100, 4), run(200, 6));
        ready = RequestEvent.newBuilder(ready).setPayload(io.orbitkv.pd.events.DecodeReady.newBuilder((io.orbitkv.pd.events.DecodeReady) ready.getPayload())
                .setCachedBlocks(7).build()).build();
        Step s = m.onEvent(b.state(), ready, 1002);
        TransferOrder order = (TransferOrder) payloads(s).stream().filter(x -> x instanceof TransferOrder).findFirst().orElseThrow();
        assertThat(order.getSkipBlocks()).isEqualTo(7);
        assertThat(order.getDestBlocks()).containsExactly(run(203, 3));
        assertThat(order.getSourceBlocks()).containsExactly(run(7, 3));
        assertThat(order.getDeadlineMs()).as("the budget covers the 3 blocks that move").isEqualTo(1002 + 10_000 + 3L * 4 * 2 * 32768 * 1000 / 50_000_000);
        assertThat(new io.orbitkv.pd.schemas.OrderTokens(Facts.policy().authKey()).verify(order.getOrderId(), order.getLeaseEpoch(),
                order.getDestEngineId(), order.getDestInstanceEpoch(), order.getDestBlocks(), order.getAuthToken().array())).isTrue();
    }

    /**
     * Seen in the partitions chaos run (PUSH_ACK_STALE_EPOCH, under load): attempt 1's report is late, the attempt times
     * out and attempt 2 goes out; the decode engine, handed its KV as attempt 1's bytes landed, completes; then attempt 1's
     * report arrives. No decode page may be released while attempt 2 can still land: only after it reports or the drain
     * window has passed.
     */
    @Test
    void aLateReportOfAnEarlierAttemptReleasesTheDecodePagesOnlyOnceTheNewerAttemptCanNoLongerLand() {
        RequestStateMachine m = new RequestStateMachine(POLICY); // transfer 1 s, drain 500 ms, backoff 100 ms
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)),
                1003L, started(R, 1));
        Step timedOut = m.onTimer(b.state(), b.state().getOrderDeadlineMs());
        assertThat(timedOut.emits()).extracting(RequestStateMachineTest::code).contains("Abort");
        long retry = timedOut.state().getRetryAtMs();
        Step second = m.onTimer(timedOut.state(), retry);
        assertThat(second.emits()).extracting(RequestStateMachineTest::code).contains("Order");
        Step decoded = m.onEvent(second.state(), decodeCompleted(R), retry + 10);
        List<String> all = new ArrayList<>(decoded.emits().stream().map(RequestStateMachineTest::code).toList());
        Step late = m.onEvent(decoded.state(), completed(R, 1), retry + 20);
        all.addAll(late.emits().stream().map(RequestStateMachineTest::code).toList());
        assertThat(all).as("attempt 2 may still land: decode pages held").doesNotContain("RelD");
        // attempt 2 reports (it was aborted): now nothing can land, the pages go
        Step settled = m.onEvent(late.state(), failed(R, 2, false), retry + 30);
        DeciderState after = settled.state();
        List<String> rest = new ArrayList<>(settled.emits().stream().map(RequestStateMachineTest::code).toList());
        if (!rest.contains("RelD")) {
            rest.addAll(m.onTimer(after, Math.max(after.getDrainUntilMs(), after.getNextTimerMs())).emits().stream()
                    .map(RequestStateMachineTest::code).toList());
        }
        assertThat(rest).contains("RelD");
    }

    /**
     * Releases wait for every attempt's report, not only for the drain window: a sender lagging on its commands can read an
     * order after its abort and push then (the partitions chaos run: attempt 3, aborted because attempt 1 had completed,
     * pushed 4 s after both sides' pages were released). A report releases at once; a sender that never reports is taken
     * as gone twice the lease (3 s here) after the attempt was given up; a new instance of the source at once.
     */
    @Test
    void releasesWaitForTheReportOfEveryAttemptGivenUp() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)), 1003L, cancel(R));
        long drain = m.nextDeadline(b.state());
        Step t = m.onTimer(b.state(), drain);
        assertThat(t.emits()).as("the drain window is over, the attempt has not reported").isEmpty();
        assertThat(m.nextDeadline(t.state())).as("twice the lease after the abort").isEqualTo(1003 + 6000);
        java.util.function.Supplier<io.orbitkv.pd.state.DeciderState> after = () -> io.orbitkv.pd.state.DeciderState.newBuilder(t.state()).build();
        Step late = m.onEvent(after.get(), failed(R, 1, false), drain + 2000);
        assertThat(late.emits()).extracting(RequestStateMachineTest::code).containsExactly("RelP", "RelD");
        assertThat(m.onTimer(after.get(), 1003 + 5999).emits()).isEmpty();
        Step never = m.onTimer(after.get(), 1003 + 6000);
        assertThat(never.emits()).extracting(RequestStateMachineTest::code).containsExactly("RelP", "RelD");
        Step gone = m.onEvent(after.get(), epochChanged(R, PREFILL, 2), drain + 10);
        assertThat(gone.emits()).extracting(RequestStateMachineTest::code).contains("RelP", "RelD");
    }

    // ------------------------------------------------------------------------------------------------ bugs

    /**
     * BUG-1: an engine restart under a request that is still awaiting admission and holds prefill pages makes
     * {@code prefillLost} dereference the missing admission. The ticker does send such facts (it scans every
     * request holding pages), and the NPE is a poison pill for the stream task.
     */
    @Test
    void bug1_prefillEngineRestartBeforeAdmissionDoesNotThrow() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = replay(m, 1000L, prefillCompleted(R, run(0, 4)));
        Step s = m.onEvent(b.state(), epochChanged(R, PREFILL, 2), 1010);
        assertThat(s.emits()).extracting(RequestStateMachineTest::code).containsExactly("RelP");
        // and once admitted, the request fails (FAIL policy, nothing to recompute from) with one outcome
        Step a = m.onEvent(s.state(), admitted(R), 1020);
        assertThat(a.emits()).extracting(RequestStateMachineTest::code).containsExactly("Outcome:FAILED");
    }

    /**
     * BUG-1b: a decode engine restart before admission emits a RequestOutcome for a request that was never
     * admitted (the admission-grace path is careful to emit none), and the request then never gets an outcome
     * bound to its engines.
     */
    @Test
    void bug1b_decodeEngineRestartBeforeAdmissionEmitsNoOutcome() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = replay(m, 1000L, decodeReady(R, run(100, 4)));
        Step s = m.onEvent(b.state(), epochChanged(R, DECODE, 2), 1010);
        assertThat(s.emits()).extracting(RequestStateMachineTest::code).containsExactly("RelD");
        assertThat(s.state().getPhase()).isEqualTo(Phase.AWAITING_ADMISSION);
    }

    /** BUG-2: a prefill engine restart during a transfer emits AbortTransfer twice for the same attempt. */
    @Test
    void bug2_prefillEngineRestartDuringTransferAbortsOnce() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = build(Phase.TRANSFERRING);
        Step s = m.onEvent(b.state(), epochChanged(R, PREFILL, 2), b.now() + 10);
        assertThat(s.emits()).extracting(RequestStateMachineTest::code).containsExactly("RelP", "Abort", "Outcome:FAILED");
    }

    /**
     * BUG-3: new prefill pages reported after the outcome, while an aborted attempt is still draining, are never
     * released: {@code release()} defers them by marking a temporary HeldPages that is not part of the state.
     */
    @Test
    void bug3_latePrefillPagesWhileDrainingAreReleased() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = build(Phase.CANCELLED);
        Step s = m.onEvent(b.state(), prefillCompleted(R, run(200, 4)), b.now() + 10);
        List<String> now = s.emits().stream().map(RequestStateMachineTest::code).toList();
        // either released at once (no order refers to these pages) or later; drain everything and count
        Step t = m.onTimer(s.state(), m.nextDeadline(s.state()));
        long releasedNew = Stream.concat(s.emits().stream(), t.emits().stream()).map(Emit::payload)
                .filter(ReleaseDecided.class::isInstance).map(ReleaseDecided.class::cast)
                .filter(r -> r.getBlocks().equals(List.of(run(200, 4)))).count();
        assertThat(releasedNew).as("releases of the late pages 200+4 (decisions at once: %s)", now).isEqualTo(1);
    }

    /**
     * BUG-4: a RequestAdmitted that arrives after the admission grace of earlier facts elapsed (the request was
     * closed as "never admitted", pages released, no outcome) is accepted silently: the admitted request never
     * gets a RequestOutcome. Stream-time gaps make this reachable with a proxy only slightly behind the engines.
     */
    @Test
    void bug4_admissionAfterTheGraceStillGetsExactlyOneOutcome() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        Built b = replay(m, 1000L, decodeReady(R, run(100, 4)));
        Step grace = m.onTimer(b.state(), 2000);
        assertThat(grace.state().getPhase()).isEqualTo(Phase.FAILED);
        assertThat(grace.emits()).extracting(RequestStateMachineTest::code).contains("Outcome:FAILED"); // the request the log knows ends
        Step s = m.onEvent(grace.state(), admitted(R), 2100);
        assertThat(s.emits()).as("its one outcome is already out").extracting(RequestStateMachineTest::code).doesNotContain("Outcome:FAILED");
    }

    /**
     * RISK-5 (not in the table): duplicates are recognized by the last 16 event ids only. A redelivered
     * PrefillCompleted after 16 newer facts (heartbeats of a long decode) is taken as new pages once the request
     * is terminal, and the same prefill pages are released a second time (with no lease to fence it).
     */
    @Test
    void risk5_redeliveredPrefillFactAfterManyHeartbeatsIsNotReleasedTwice() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        RequestEvent pc = prefillCompleted(R, run(0, 4));
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, pc, 1003L, completed(R, 1));
        DeciderState s = b.state();
        for (int i = 0; i < 16; i++) {
            s = m.onEvent(s, heartbeat(R, 1, 0), 1100 + i).state();
        }
        s = m.onEvent(s, decodeCompleted(R), 1200).state();
        Step again = m.onEvent(s, pc, 1300);
        assertThat(again.emits()).as("a redelivery of the prefill fact whose pages were released at KvReady").isEmpty();
    }

    /** The prefill's sampled token travels to the decode engine in KvReady (it continues from it, as SGLang's decode does). */
    @Test
    void kvReadyCarriesThePrefillsFirstToken() {
        RequestStateMachine m = new RequestStateMachine(POLICY);
        RequestEvent pc = prefillCompleted(R, run(0, 4));
        ((io.orbitkv.pd.events.PrefillCompleted) pc.getPayload()).setFirstToken(4242);
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, pc);
        Step s = m.onEvent(b.state(), completed(R, 1), 1003);
        assertThat(s.emits()).extracting(RequestStateMachine.Emit::payload).filteredOn(p -> p instanceof KvReady)
                .singleElement().extracting(p -> ((KvReady) p).getFirstToken()).isEqualTo(4242);
    }
    // ------------------------------------------------------------------------------------------------ order-ahead

    private static final DeciderPolicy AHEAD = POLICY.withOrderAhead(true);

    private static List<Object> payloads(Step s) {
        return s.emits().stream().map(e -> (Object) e.payload()).toList();
    }

    @Test
    void orderAheadIssuesTheOrderWhenTheDecodePagesAreHeldAndConfirmsItWithTheSourcePages() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Built b = replay(m, 1000L, admitted(R));
        Step ready = m.onEvent(b.state(), decodeReady(R, run(100, 4)), 1001);
        assertThat(ready.state().getPhase()).isEqualTo(Phase.TRANSFERRING);
        TransferOrder ahead = (TransferOrder) payloads(ready).stream().filter(p -> p instanceof TransferOrder).findFirst().orElseThrow();
        assertThat(ahead.getAwaitPrefill()).isTrue();
        assertThat(ahead.getSourceBlocks()).isEmpty();
        assertThat(ahead.getSourceEngineId()).isEqualTo(PREFILL);
        assertThat(ahead.getSourceInstanceEpoch()).isEqualTo(-1);
        assertThat(ahead.getLayout()).isEqualTo(layout());
        // the prefill timeout, the transfer timeout, and the order's 1 MiB (4 blocks x 4 layers x K/V x 32 KiB) at 50 MB/s
        assertThat(ahead.getDeadlineMs()).as("covers the prefill timeout and the transfer").isEqualTo(1000 + 2000 + 1000 + (4L << 18) * 1000 / 50_000_000);

        RequestEvent pc = prefillCompleted(R, run(0, 4));
        ((io.orbitkv.pd.events.PrefillCompleted) pc.getPayload()).setFirstToken(7);
        Step done = m.onEvent(ready.state(), pc, 1500);
        TransferOrder again = (TransferOrder) payloads(done).stream().filter(p -> p instanceof TransferOrder).findFirst().orElseThrow();
        assertThat(again.getOrderId()).isEqualTo(ahead.getOrderId());
        assertThat(again.getAttempt()).isEqualTo(1);
        assertThat(again.getAwaitPrefill()).isFalse();
        assertThat(again.getSourceBlocks()).containsExactly(run(0, 4));
        assertThat(again.getSourceInstanceEpoch()).isEqualTo(1);
        assertThat(again.getFirstToken()).isEqualTo(7);
        assertThat(again.getAuthToken()).as("the token covers the destination only").isEqualTo(ahead.getAuthToken());
        assertThat(again.getDeadlineMs()).isEqualTo(1500 + 1000 + (4L << 18) * 1000 / 50_000_000);
        assertThat(done.state().getAttempt()).isEqualTo(1);

        Step kv = m.onEvent(done.state(), completed(R, 1), 1510);
        assertThat(payloads(kv)).anySatisfy(p -> assertThat(p).isInstanceOf(KvReady.class));
        assertThat(payloads(kv)).anySatisfy(p -> assertThat(p).isInstanceOfSatisfying(ReleaseDecided.class,
                r -> assertThat(r.getSide()).isEqualTo(ReleaseSide.PREFILL)));
    }

    @Test
    void orderAheadWaitsForAdmissionAndIsNotIssuedWhenThePrefillCameFirst() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Step early = m.onEvent(null, decodeReady(R, run(100, 4)), 1000);
        assertThat(early.emits()).isEmpty();
        Built b = replay(m, 1000L, admitted(R), 1001L, prefillCompleted(R, run(0, 4)));
        Step order = m.onEvent(b.state(), decodeReady(R, run(100, 4)), 1002);
        assertThat(payloads(order)).singleElement().isInstanceOfSatisfying(TransferOrder.class, o -> assertThat(o.getAwaitPrefill()).isFalse());
    }

    @Test
    void aPrefillFailureAfterAnOrderAheadAbortsIt() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)));
        Step s = m.onEvent(b.state(), prefillFailed(R), 1100);
        assertThat(payloads(s)).filteredOn(p -> p instanceof AbortTransfer).singleElement()
                .satisfies(p -> assertThat(((AbortTransfer) p).getSourceEngineId()).isEqualTo(PREFILL));
        assertThat(s.state().getOutcome()).isEqualTo(OutcomeKind.FAILED);
        assertThat(payloads(s)).as("decode pages wait for the aborted attempt to drain").noneMatch(p -> p instanceof ReleaseDecided);
        Step settled = m.onEvent(s.state(), failed(R, 1, false), 1101);
        assertThat(payloads(settled)).filteredOn(p -> p instanceof ReleaseDecided).hasSize(1);
    }

    @Test
    void aPrefillTimeoutAfterAnOrderAheadAbortsItOnce() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Built b = replay(m, 1000L, admitted(R, FailurePolicy.RECOMPUTE), 1001L, decodeReady(R, run(100, 4)));
        assertThat(m.nextDeadline(b.state())).isEqualTo(1000 + 2000);
        Step s = m.onTimer(b.state(), 3000);
        assertThat(payloads(s)).filteredOn(p -> p instanceof AbortTransfer).hasSize(1);
        assertThat(payloads(s)).anySatisfy(p -> assertThat(p).isInstanceOf(RecomputeDecided.class));
    }

    @Test
    void mismatchedPagesReportedAfterAnOrderAheadAbortIt() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)));
        Step s = m.onEvent(b.state(), prefillCompleted(R, run(0, 3)), 1100);
        assertThat(payloads(s)).anySatisfy(p -> assertThat(p).isInstanceOf(AbortTransfer.class));
        assertThat(payloads(s)).noneMatch(p -> p instanceof TransferOrder);
        assertThat(s.state().getOutcome()).isEqualTo(OutcomeKind.FAILED);
        assertThat(s.state().getOutcomeReason()).contains("source holds 3 blocks, destination 4");
    }

    @Test
    void aDecodeCompletedThatOvertakesTheTransfersReportCompletesTheRequestOnThatReport() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, prefillCompleted(R, run(0, 4)));
        Step early = m.onEvent(b.state(), decodeCompleted(R), 1003);
        assertThat(early.rejection()).isNull();
        assertThat(early.emits()).isEmpty();
        assertThat(early.state().getPhase()).isEqualTo(Phase.TRANSFERRING);
        Step done = m.onEvent(early.state(), completed(R, 1), 1004);
        assertThat(payloads(done)).anySatisfy(p -> assertThat(p).isInstanceOf(KvReady.class));
        assertThat(done.state().getOutcome()).isEqualTo(OutcomeKind.COMPLETED);
        assertThat(payloads(done)).filteredOn(p -> p instanceof ReleaseDecided).hasSize(2);
        assertThat(payloads(done)).filteredOn(p -> p instanceof RequestOutcome).hasSize(1);
    }

    @Test
    void prefillPagesReportedAfterACancelWaitForTheOrderAheadToDrain() {
        RequestStateMachine m = new RequestStateMachine(AHEAD);
        Built b = replay(m, 1000L, admitted(R), 1001L, decodeReady(R, run(100, 4)), 1002L, cancel(R));
        assertThat(b.state().getPhase()).isEqualTo(Phase.CANCELLED);
        Step late = m.onEvent(b.state(), prefillCompleted(R, run(0, 4)), 1003);
        assertThat(payloads(late)).as("its worker may be pushing from them").noneMatch(p -> p instanceof ReleaseDecided);
        Step settled = m.onEvent(late.state(), failed(R, 1, false), 1004);
        assertThat(payloads(settled)).filteredOn(p -> p instanceof ReleaseDecided).extracting(p -> ((ReleaseDecided) p).getSide())
                .containsExactlyInAnyOrder(ReleaseSide.PREFILL, ReleaseSide.DECODE);
    }
}
