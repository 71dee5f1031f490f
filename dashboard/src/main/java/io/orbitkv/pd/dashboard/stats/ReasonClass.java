package io.orbitkv.pd.dashboard.stats;

import java.util.ArrayList;
import java.util.List;

/**
 * Turns a free-text failure reason into a low-cardinality class for counters and metric labels: the text before the
 * first {@code ':'} (so a worker's {@code "PEER_UNREACHABLE: connect to 10.0.0.7:7001 refused"} is
 * {@code PEER_UNREACHABLE}), with every word that carries a number or an identifier ({@code 2000}, {@code r-17@3},
 * {@code 'x'}) replaced by {@code *}, at most 60 characters. The full text stays in the recent-failures list.
 */
public final class ReasonClass {

    public static final int MAX_LENGTH = 60;

    private ReasonClass() { }

    public static String of(String reason) {
        if (reason == null || reason.isBlank()) {
            return "unknown";
        }
        String head = reason.strip();
        int colon = head.indexOf(':');
        if (colon > 0) {
            head = head.substring(0, colon);
        }
        List<String> words = new ArrayList<>();
        for (String w : head.strip().split("\\s+")) {
            String word = w.chars().anyMatch(c -> Character.isDigit(c) || "@/'\"=#".indexOf(c) >= 0) ? "*" : w;
            if (!(word.equals("*") && !words.isEmpty() && words.getLast().equals("*"))) {
                words.add(word);
            }
        }
        String out = String.join(" ", words);
        return out.length() <= MAX_LENGTH ? out : out.substring(0, MAX_LENGTH);
    }
}
