package io.orbitkv.pd.harness;

/** The {@code --hosts loopback|netns} and {@code --link RATE} options of the commands that start a pipeline. */
public final class HostsOption {

    private HostsOption() {
    }

    /**
     * Whether {@code --hosts} asks for network namespaces.
     *
     * @throws IllegalArgumentException for another word, or {@code --link} without {@code --hosts netns}
     */
    public static boolean netns(String hosts, String link) {
        boolean netns = switch (hosts == null ? "loopback" : hosts) {
            case "loopback" -> false;
            case "netns" -> true;
            default -> throw new IllegalArgumentException("--hosts: loopback or netns, got " + hosts);
        };
        if (link != null && !netns) {
            throw new IllegalArgumentException("--link: needs --hosts netns (a link of its own per host to limit)");
        }
        return netns;
    }
}
