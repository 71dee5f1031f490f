package io.orbitkv.pd.schemas.config;

import java.net.URI;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Bind and advertised addresses, as every listener of every component takes them (docs/deploy.md, "Addresses").
 *
 * <p>A listener binds one address and tells its peers another: the one they can reach it at. Nothing here guesses an
 * address from the host name or a default route. The advertised address is the one set explicitly, else the bind
 * address when that is a concrete address; a wildcard bind ({@code 0.0.0.0}, {@code ::}) with no advertised address
 * is an error naming the key, since a peer told {@code 0.0.0.0} connects to itself. A component whose Kafka cluster is
 * on other hosts (a bootstrap server that is not loopback) has peers on other hosts too: advertising loopback there
 * is refused at start, naming the key, instead of peers quietly connecting to themselves (vLLM #27083, Dynamo #6539).
 */
public final class Addresses {

    private Addresses() {
    }

    /** Whether {@code host} is a wildcard address ({@code 0.0.0.0}, {@code ::}, {@code *}, or empty). */
    public static boolean isWildcard(String host) {
        if (host == null) {
            return true;
        }
        String h = strip(host);
        return h.isEmpty() || h.equals("*") || h.equals("0.0.0.0") || h.equals("::") || h.equals("0:0:0:0:0:0:0:0");
    }

    /**
     * Whether {@code host} names this machine's loopback: {@code localhost}, {@code 127.0.0.0/8}, {@code ::1}. Only literal
     * addresses and {@code localhost} are judged (no name lookup: a name may resolve differently on the peer's host).
     */
    public static boolean isLoopback(String host) {
        if (host == null) {
            return false;
        }
        String h = strip(host).toLowerCase(Locale.ROOT);
        if (h.equals("localhost") || h.endsWith(".localhost")) {
            return true;
        }
        if (h.matches("127\\.\\d{1,3}\\.\\d{1,3}\\.\\d{1,3}") || h.equals("::1") || h.equals("0:0:0:0:0:0:0:1")) {
            return true;
        }
        return false;
    }

    /**
     * The address peers are told: {@code advertised} if set, else {@code bind} when it is a concrete address.
     *
     * @throws IllegalArgumentException naming {@code advertisedKey} when the bind address is a wildcard and nothing is
     *                                  advertised
     */
    public static String advertised(String bindKey, String bind, String advertisedKey, String advertised) {
        if (advertised != null && !advertised.isBlank()) {
            if (isWildcard(advertised)) {
                throw new IllegalArgumentException(advertisedKey + ": a wildcard address (" + advertised + ") cannot be advertised: peers"
                        + " would connect to themselves; set the address peers reach this host at");
            }
            return advertised.strip();
        }
        if (isWildcard(bind)) {
            throw new IllegalArgumentException(advertisedKey + ": required when " + bindKey + " is a wildcard (" + bind + "): set the address"
                    + " peers reach this host at (nothing is guessed from the host name or a route)");
        }
        return bind.strip();
    }

    /**
     * Refuses a listener bound to loopback while peers are told a non-loopback address: they would connect to an address
     * nothing listens on (Dynamo #5309). Bind a wildcard or the advertised address itself.
     *
     * @throws IllegalArgumentException naming {@code bindKey}
     */
    public static void requireListening(String bindKey, String bind, String advertisedKey, String advertised) {
        if (isLoopback(bind) && advertised != null && !isLoopback(advertised)) {
            throw new IllegalArgumentException(bindKey + ": " + bind + " listens on loopback only, but " + advertisedKey + " tells peers "
                    + advertised + ": bind 0.0.0.0 or " + advertised);
        }
    }

    /** The host part of each {@code host:port} of a {@code bootstrap.servers} list (IPv6 in brackets allowed). */
    public static List<String> bootstrapHosts(String bootstrapServers) {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            return List.of();
        }
        return Arrays.stream(bootstrapServers.split(",")).map(String::strip).filter(s -> !s.isEmpty()).map(Addresses::hostOf).toList();
    }

    /**
     * Whether a component on this Kafka cluster has peers on other hosts: any bootstrap server that is not loopback.
     * (A cluster reached on loopback is a one-host layout: development, the demo, the tests.)
     */
    public static boolean multiHost(String bootstrapServers) {
        return bootstrapHosts(bootstrapServers).stream().anyMatch(h -> !isLoopback(h));
    }

    /**
     * Refuses an advertised address peers on other hosts cannot use: loopback or a wildcard while {@code bootstrapServers}
     * is on other hosts.
     *
     * @throws IllegalArgumentException naming {@code key}, the address and the bootstrap servers that make the layout
     *                                  multi-host
     */
    public static void requireReachable(String key, String advertisedHost, String bootstrapServers) {
        if (!multiHost(bootstrapServers)) {
            return;
        }
        if (isLoopback(advertisedHost) || isWildcard(advertisedHost)) {
            throw new IllegalArgumentException(key + ": " + (advertisedHost == null || advertisedHost.isBlank() ? "(empty)" : advertisedHost)
                    + " is advertised, but peers are on other hosts (Kafka at " + bootstrapServers + "): they would connect to"
                    + " themselves; advertise the address they reach this host at");
        }
    }

    /**
     * As {@link #requireReachable(String, String, String)} for a listener's {@code advertised} address, naming the key that
     * set it: {@code bindKey} when it is the bind address itself, else {@code advertisedKey}.
     */
    public static void requireReachable(String bindKey, String bind, String advertisedKey, String advertised, String bootstrapServers) {
        requireReachable(advertised.equals(bind) ? bindKey : advertisedKey, advertised, bootstrapServers);
    }

    /**
     * A listener's advertised address, checked: {@link #advertised}, {@link #requireListening} and
     * {@link #requireReachable(String, String, String, String, String)} against {@code bootstrapServers}.
     */
    public static String listener(String bindKey, String bind, String advertisedKey, String advertised, String bootstrapServers) {
        String a = advertised(bindKey, bind, advertisedKey, advertised);
        requireListening(bindKey, bind, advertisedKey, a);
        requireReachable(bindKey, bind, advertisedKey, a, bootstrapServers);
        return a;
    }

    /** As {@link #requireReachable(String, String, String)} for the host of a URL ({@code http://host:port/...}). */
    public static void requireReachableUrl(String key, String url, String bootstrapServers) {
        requireReachable(key, urlHost(url), bootstrapServers);
    }

    /** The host of {@code url} (brackets of an IPv6 literal removed), or an error naming nothing but the URL. */
    public static String urlHost(String url) {
        String host = URI.create(url).getHost();
        if (host == null) {
            throw new IllegalArgumentException("not a URL with a host: " + url);
        }
        return strip(host);
    }

    private static String hostOf(String hostPort) {
        if (hostPort.startsWith("[")) {
            int end = hostPort.indexOf(']');
            return end < 0 ? hostPort : hostPort.substring(1, end);
        }
        int colon = hostPort.lastIndexOf(':');
        return colon < 0 ? hostPort : hostPort.substring(0, colon);
    }

    private static String strip(String host) {
        String h = host.strip();
        if (h.startsWith("[") && h.endsWith("]")) {
            h = h.substring(1, h.length() - 1);
        }
        return h;
    }
}
