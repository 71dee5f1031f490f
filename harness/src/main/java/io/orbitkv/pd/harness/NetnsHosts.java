package io.orbitkv.pd.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Separate network hosts on one machine: each host a Linux network namespace with its own address on a bridge, its
 * loopback up, processes started inside with {@code ip netns exec}. This machine (the harness: load client, health
 * checks) has an address on the bridge too. Faults are routes and links: {@link #cut} drops ({@code blackhole}:
 * packets vanish, as a silent partition) or refuses ({@code prohibit}: an error at once) traffic between two hosts,
 * {@link #heal} takes it back; {@link #rate} limits a host's link with {@code tc tbf} both ways; {@link #linkDown}
 * takes a host off the bridge.
 *
 * <p><b>Names and cleanup.</b> Everything made carries the run's id ({@code okv<pid base 36><n>}): namespaces
 * {@code okv-<id>-<host>}, the bridge {@code okv<id>b}, veths {@code okv<id>h<i>}. {@link #close} removes it all; a
 * reaper process started with the rig removes it when this JVM dies without closing (kill -9), and every new rig first
 * sweeps what a dead run left (its pid no longer alive). Addresses come from 198.18.0.0/15 (RFC 2544's benchmarking
 * range: never routed on the Internet), a /24 per rig that no interface here uses yet. Nothing is sent anywhere else.
 *
 * <p>Needs root and {@code ip} (iproute2); without them {@link #create} says which is missing. There is no fallback to
 * loopback.
 */
public final class NetnsHosts implements AutoCloseable {

    /** How traffic between two hosts is cut. */
    public enum Cut {
        /** {@code blackhole} routes: packets vanish, connections hang until a timeout says so (a silent partition). */
        DROP("blackhole"),
        /** {@code prohibit} routes: the sender gets an error at once (EACCES), as from an unreachable host. */
        REFUSE("prohibit");

        final String route;

        Cut(String route) {
            this.route = route;
        }
    }

    /** One host: its name in the layout, namespace, address and the host-side veth of its link. */
    public record Host(String name, String namespace, String address, String hostVeth) {
        /** The command prefix that runs a program on this host. */
        public List<String> launcher() {
            return List.of("ip", "netns", "exec", namespace);
        }
    }

    private static final String PREFIX = "okv";
    private static final Pattern NS = Pattern.compile("okv-([0-9a-z]{5})([0-9a-z])-.*");
    private static final Pattern LINK = Pattern.compile("okv([0-9a-z]{5})([0-9a-z])[bh].*");
    private static final AtomicInteger RIGS = new AtomicInteger();

    private final String id;
    private final String bridge;
    private final String harnessAddress;
    private final Map<String, Host> hosts = new LinkedHashMap<>();
    private final Set<String> cuts = new HashSet<>();
    private final String net;
    private int nextIndex;
    private final List<Process> reapers = new ArrayList<>();
    private boolean closed;

    private NetnsHosts(String id, String bridge, String net) {
        this.id = id;
        this.bridge = bridge;
        this.net = net;
        this.harnessAddress = net + "1";
    }

    /**
     * Makes one namespace per name in {@code hostNames} (letters, digits and '-'), each on the bridge with its own address.
     *
     * @throws IllegalStateException when not root, {@code ip} is missing or the kernel refuses namespaces, naming which
     */
    public static NetnsHosts create(List<String> hostNames) {
        requireCapable();
        sweepStale();
        long pid = ProcessHandle.current().pid();
        String id = pad36(pid) + Character.forDigit(RIGS.getAndIncrement() % 36, 36);
        int subnet = freeSubnet();
        String net = "198." + (18 + subnet / 256) + "." + (subnet % 256) + ".";
        NetnsHosts rig = new NetnsHosts(id, PREFIX + id + "b", net);
        try {
            ip("link", "add", rig.bridge, "type", "bridge");
            ip("addr", "add", rig.harnessAddress + "/24", "dev", rig.bridge);
            ip("link", "set", rig.bridge, "up");
            rig.startReaper(hostNames);
            for (String name : hostNames) {
                rig.addHost(name, false);
            }
            return rig;
        } catch (RuntimeException | Error e) {
            rig.close();
            throw e;
        }
    }

    /**
     * One more host on the bridge, with the next free address (a node replaced by a new machine at a new address): its
     * namespace goes with the rig, and with the reaper after a kill -9 of this JVM.
     */
    public synchronized Host addHost(String name) {
        return addHost(name, true);
    }

    private Host addHost(String name, boolean reaped) {
        if (closed) {
            throw new IllegalStateException("hosts rig closed");
        }
        if (!name.matches("[A-Za-z0-9-]{1,40}")) {
            throw new IllegalArgumentException("host name: letters, digits and '-' only, got " + name);
        }
        if (hosts.containsKey(name)) {
            throw new IllegalArgumentException("host name: " + name + " twice");
        }
        int i = nextIndex++;
        if (i > 200) {
            throw new IllegalStateException("hosts rig: no address left on " + net + "0/24");
        }
        String ns = PREFIX + "-" + id + "-" + name;
        String veth = PREFIX + id + "h" + Integer.toString(i, 36);
        String peer = PREFIX + id + "p" + Integer.toString(i, 36);
        String addr = net + (10 + i);
        if (reaped) {
            startReaper(List.of(name));
        }
        ip("netns", "add", ns);
        ip("link", "add", veth, "type", "veth", "peer", "name", peer);
        ip("link", "set", peer, "netns", ns);
        ip("link", "set", veth, "master", bridge, "up");
        ip("-n", ns, "link", "set", peer, "name", "eth0");
        ip("-n", ns, "addr", "add", addr + "/24", "dev", "eth0");
        ip("-n", ns, "link", "set", "eth0", "up");
        ip("-n", ns, "link", "set", "lo", "up");
        Host h = new Host(name, ns, addr, veth);
        hosts.put(name, h);
        return h;
    }

    /** Removes host {@code name} (its namespace, veth and every route other hosts had to it): a machine gone for good. */
    public synchronized void removeHost(String name) {
        Host h = host(name);
        healAll(name);
        run(List.of("ip", "netns", "del", h.namespace()), true);
        run(List.of("ip", "link", "del", h.hostVeth()), true);
        hosts.remove(name);
    }

    /** The run's id that every name this rig made carries. */
    public String id() {
        return id;
    }

    /** This machine's address on the bridge: what the hosts see the harness (load client, health checks) as. */
    public String harnessAddress() {
        return harnessAddress;
    }

    public Host host(String name) {
        Host h = hosts.get(name);
        if (h == null) {
            throw new IllegalArgumentException("no host called " + name + "; have " + hosts.keySet());
        }
        return h;
    }

    public List<Host> hosts() {
        return List.copyOf(hosts.values());
    }

    public String address(String name) {
        return host(name).address();
    }

    /** Cuts traffic between hosts {@code a} and {@code b} both ways ({@link #heal} undoes it). */
    public synchronized void cut(String a, String b, Cut how) {
        route("add", host(a), host(b).address(), how);
        route("add", host(b), host(a).address(), how);
        cuts.add(a + "|" + b + "|" + how.name());
    }

    /** Undoes {@link #cut} between {@code a} and {@code b}. */
    public synchronized void heal(String a, String b) {
        for (Cut how : Cut.values()) {
            if (cuts.remove(a + "|" + b + "|" + how.name()) || cuts.remove(b + "|" + a + "|" + how.name())) {
                route("del", host(a), host(b).address(), how);
                route("del", host(b), host(a).address(), how);
            }
        }
    }

    /** Cuts {@code name} from every other host (not from the harness: it still watches). */
    public synchronized void isolate(String name, Cut how) {
        for (String other : hosts.keySet()) {
            if (!other.equals(name)) {
                cut(name, other, how);
            }
        }
    }

    /** Undoes every cut that involves {@code name}. */
    public synchronized void healAll(String name) {
        for (String other : hosts.keySet()) {
            if (!other.equals(name)) {
                heal(name, other);
            }
        }
    }

    /**
     * Limits {@code name}'s link to {@code rate} (tc's units: {@code 10gbit}, {@code 500mbit}) both ways: a token bucket
     * on each end of its veth, with a burst of 4 ms at that rate (at least 256 KiB, so the veth's segment offload
     * fits). {@code null} takes the limit away.
     */
    public synchronized void rate(String name, String rate) {
        Host h = host(name);
        if (rate == null) {
            run(List.of("tc", "qdisc", "del", "dev", h.hostVeth(), "root"), true);
            run(List.of("ip", "netns", "exec", h.namespace(), "tc", "qdisc", "del", "dev", "eth0", "root"), true);
            return;
        }
        long bits = bitsPerSecond(rate);
        long burst = Math.max(256 << 10, bits / 8 / 250);
        List<String> tbf = List.of("root", "tbf", "rate", rate, "burst", Long.toString(burst), "latency", "100ms");
        List<String> outer = new ArrayList<>(List.of("tc", "qdisc", "replace", "dev", h.hostVeth()));
        outer.addAll(tbf);
        run(outer, false);
        List<String> inner = new ArrayList<>(List.of("ip", "netns", "exec", h.namespace(), "tc", "qdisc", "replace", "dev", "eth0"));
        inner.addAll(tbf);
        run(inner, false);
    }

    /** Takes {@code name}'s link down (every peer and the harness lose it), or up again. */
    public synchronized void linkDown(String name, boolean down) {
        Host h = host(name);
        ip("link", "set", h.hostVeth(), down ? "down" : "up");
    }

    /** tc's rate units to bits per second ({@code 10gbit}, {@code 500mbit}, {@code 100kbit}, {@code 1000000bit}). */
    static long bitsPerSecond(String rate) {
        Matcher m = Pattern.compile("(\\d+(?:\\.\\d+)?)([kmg]?)(bit|bps)").matcher(rate.toLowerCase(Locale.ROOT).strip());
        if (!m.matches()) {
            throw new IllegalArgumentException("--link: a rate such as 10gbit, 500mbit or 1gbps, got " + rate);
        }
        double v = Double.parseDouble(m.group(1));
        v *= switch (m.group(2)) {
            case "k" -> 1e3;
            case "m" -> 1e6;
            case "g" -> 1e9;
            default -> 1;
        };
        return (long) (m.group(3).equals("bps") ? v * 8 : v);
    }

    private static void route(String op, Host in, String to, Cut how) {
        run(List.of("ip", "-n", in.namespace(), "route", op, how.route, to + "/32"), op.equals("del"));
    }

    /** Removes every namespace, veth and the bridge of this rig, then the reaper. Idempotent. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        for (Host h : hosts.values()) {
            run(List.of("ip", "netns", "del", h.namespace()), true);
        }
        run(List.of("ip", "link", "del", bridge), true);
        reapers.forEach(Process::destroy);
    }

    /**
     * A process outside this JVM that waits for it to end and then removes this rig's namespaces and bridge: a run killed
     * with -9 leaves nothing behind. {@link #close} stops it.
     */
    private void startReaper(List<String> names) {
        StringBuilder sh = new StringBuilder("tail --pid=" + ProcessHandle.current().pid() + " -f /dev/null 2>/dev/null;");
        for (String n : names) {
            sh.append(" ip netns del ").append(PREFIX).append('-').append(id).append('-').append(n).append(" 2>/dev/null;");
        }
        sh.append(" ip link del ").append(bridge).append(" 2>/dev/null; exit 0");
        try {
            Process reaper = new ProcessBuilder("setsid", "sh", "-c", sh.toString()).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
            reaper.getOutputStream().close();
            reapers.add(reaper);
        } catch (IOException e) {
            throw new UncheckedIOException("hosts rig: cannot start its reaper (setsid, sh)", e);
        }
    }

    /** Removes namespaces and links of rigs whose JVM is gone. */
    static void sweepStale() {
        for (String line : out(List.of("ip", "netns", "list"))) {
            String ns = line.split("\\s+")[0];
            Matcher m = NS.matcher(ns);
            if (m.matches() && !alive(m.group(1))) {
                run(List.of("ip", "netns", "del", ns), true);
            }
        }
        for (String line : out(List.of("ip", "-o", "link", "show"))) {
            String[] f = line.split(":\\s+");
            if (f.length < 2) {
                continue;
            }
            String name = f[1].split("@")[0];
            Matcher m = LINK.matcher(name);
            if (m.matches() && !alive(m.group(1))) {
                run(List.of("ip", "link", "del", name), true);
            }
        }
    }

    private static boolean alive(String pid36) {
        return ProcessHandle.of(Long.parseLong(pid36, 36)).map(ProcessHandle::isAlive).orElse(false);
    }

    /** A /24 of 198.18.0.0/15 that no interface of this machine has an address in. */
    private static int freeSubnet() {
        Set<Integer> used = new HashSet<>();
        Pattern a = Pattern.compile("inet 198\\.(18|19)\\.(\\d+)\\.");
        for (String line : out(List.of("ip", "-o", "-4", "addr", "show"))) {
            Matcher m = a.matcher(line);
            if (m.find()) {
                used.add((Integer.parseInt(m.group(1)) - 18) * 256 + Integer.parseInt(m.group(2)));
            }
        }
        int start = (int) (ProcessHandle.current().pid() * 7 + RIGS.get()) % 512;
        for (int k = 0; k < 512; k++) {
            int s = (start + k) % 512;
            if (!used.contains(s)) {
                return s;
            }
        }
        throw new IllegalStateException("hosts rig: every /24 of 198.18.0.0/15 is in use on this machine");
    }

    private static void requireCapable() {
        List<String> id = out(List.of("id", "-u"));
        if (id.isEmpty() || !id.get(0).strip().equals("0")) {
            throw new IllegalStateException("--hosts netns: needs root (network namespaces, veths, a bridge, routes); running as uid "
                    + (id.isEmpty() ? "?" : id.get(0).strip()) + ". Run as root, or leave --hosts out to run everything on loopback.");
        }
        try {
            Process p = new ProcessBuilder("ip", "netns", "list").redirectErrorStream(true).start();
            String o = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            if (p.waitFor() != 0) {
                throw new IllegalStateException("--hosts netns: 'ip netns list' failed: " + o.strip());
            }
        } catch (IOException e) {
            throw new IllegalStateException("--hosts netns: needs the ip command (iproute2): " + e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    private static String pad36(long pid) {
        String s = Long.toString(pid, 36);
        if (s.length() > 5) {
            throw new IllegalStateException("pid " + pid + " does not fit the rig's names");
        }
        return "0".repeat(5 - s.length()) + s;
    }

    private static void ip(String... args) {
        List<String> cmd = new ArrayList<>(List.of("ip"));
        cmd.addAll(List.of(args));
        run(cmd, false);
    }

    /** Runs {@code cmd}; a failure is an error naming the command and what it said, unless {@code quiet}. */
    private static void run(List<String> cmd, boolean quiet) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String o = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
            if (!p.waitFor(30, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                throw new IllegalStateException("hosts rig: " + String.join(" ", cmd) + " did not finish in 30 s");
            }
            if (p.exitValue() != 0 && !quiet) {
                throw new IllegalStateException("hosts rig: " + String.join(" ", cmd) + " failed (" + p.exitValue() + "): " + o);
            }
        } catch (IOException e) {
            if (!quiet) {
                throw new UncheckedIOException("hosts rig: cannot run " + String.join(" ", cmd), e);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    private static List<String> out(List<String> cmd) {
        try {
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String o = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            p.waitFor();
            return o.isBlank() ? List.of() : List.of(o.split("\n"));
        } catch (IOException e) {
            return List.of();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return List.of();
        }
    }
}
