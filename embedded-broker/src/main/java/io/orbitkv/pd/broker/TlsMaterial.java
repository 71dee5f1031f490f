package io.orbitkv.pd.broker;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * A development certificate authority and a broker certificate it signed, as PKCS12 stores, made with the JDK's own
 * {@code keytool} (no key material is committed or downloaded): what a secured development broker and its test clients
 * need. A production cluster brings its own (Strimzi's cluster CA, a company CA).
 *
 * @param dir        where the stores are
 * @param password   the password of every store and key here
 * @param truststore the CA's certificate: what clients trust
 * @param keystore   the broker's key and its certificate chain (valid for {@code localhost} and {@code 127.0.0.1})
 */
public record TlsMaterial(Path dir, String password, Path truststore, Path keystore) {

    /** The store type of every file here. */
    public static final String STORE_TYPE = "PKCS12";

    /** A CA and a broker certificate valid for ten years from now. */
    public static TlsMaterial generate(Path dir, String password) {
        return generate(dir, password, List.of());
    }

    /**
     * As {@link #generate(Path, String)}, the broker's certificate also valid for {@code hosts} (addresses or names clients
     * on other machines reach it at), beside {@code localhost} and {@code 127.0.0.1}.
     */
    public static TlsMaterial generate(Path dir, String password, List<String> hosts) {
        try {
            Files.createDirectories(dir);
            Path ca = dir.resolve("ca.p12");
            Path caPem = dir.resolve("ca.pem");
            Path trust = dir.resolve("truststore.p12");
            Path broker = dir.resolve("broker.p12");
            Path csr = dir.resolve("broker.csr");
            Path brokerPem = dir.resolve("broker.pem");
            for (Path p : List.of(ca, caPem, trust, broker, csr, brokerPem)) {
                Files.deleteIfExists(p);
            }
            keytool("-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=orbitkv-dev-ca", "-ext", "bc:c",
                    "-validity", "3650", "-keystore", ca.toString(), "-storetype", STORE_TYPE, "-storepass", password, "-keypass", password);
            keytool("-exportcert", "-rfc", "-alias", "ca", "-keystore", ca.toString(), "-storepass", password, "-file", caPem.toString());
            keytool("-importcert", "-noprompt", "-alias", "ca", "-file", caPem.toString(), "-keystore", trust.toString(), "-storetype", STORE_TYPE,
                    "-storepass", password);
            keytool("-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=localhost", "-validity", "3650",
                    "-keystore", broker.toString(), "-storetype", STORE_TYPE, "-storepass", password, "-keypass", password);
            keytool("-certreq", "-alias", "broker", "-keystore", broker.toString(), "-storepass", password, "-file", csr.toString());
            List<String> sign = new ArrayList<>(List.of("-gencert", "-alias", "ca", "-keystore", ca.toString(), "-storepass", password,
                    "-infile", csr.toString(), "-outfile", brokerPem.toString(), "-rfc", "-ext", "SAN=" + sans(hosts)));
            sign.addAll(List.of("-validity", "3650"));
            keytool(sign.toArray(String[]::new));
            keytool("-importcert", "-noprompt", "-alias", "ca", "-file", caPem.toString(), "-keystore", broker.toString(), "-storepass", password);
            keytool("-importcert", "-noprompt", "-alias", "broker", "-file", brokerPem.toString(), "-keystore", broker.toString(),
                    "-storepass", password);
            return new TlsMaterial(dir, password, trust, broker);
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write TLS material to " + dir + ": " + e.getMessage(), e);
        }
    }

    /**
     * A second keystore for the broker ({@code broker-expired.p12}), signed by this CA but ended yesterday: what a client
     * says when a broker's certificate has expired (swapped in at runtime as a dynamic listener setting, in tests).
     */
    public Path expiredKeystore() {
        try {
            Path ks = dir.resolve("broker-expired.p12");
            Path csr = dir.resolve("broker-expired.csr");
            Path pem = dir.resolve("broker-expired.pem");
            for (Path p : List.of(ks, csr, pem)) {
                Files.deleteIfExists(p);
            }
            Path ca = dir.resolve("ca.p12");
            keytool("-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048", "-dname", "CN=localhost", "-validity", "3650",
                    "-keystore", ks.toString(), "-storetype", STORE_TYPE, "-storepass", password, "-keypass", password);
            keytool("-certreq", "-alias", "broker", "-keystore", ks.toString(), "-storepass", password, "-file", csr.toString());
            keytool("-gencert", "-alias", "ca", "-keystore", ca.toString(), "-storepass", password, "-infile", csr.toString(), "-outfile",
                    pem.toString(), "-rfc", "-ext", "SAN=dns:localhost,ip:127.0.0.1", "-startdate", "-10d", "-validity", "9");
            keytool("-importcert", "-noprompt", "-alias", "ca", "-file", dir.resolve("ca.pem").toString(), "-keystore", ks.toString(),
                    "-storepass", password);
            keytool("-importcert", "-noprompt", "-alias", "broker", "-file", pem.toString(), "-keystore", ks.toString(), "-storepass", password);
            return ks;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot write an expired keystore to " + dir + ": " + e.getMessage(), e);
        }
    }

    private static void keytool(String... args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "keytool").toString());
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        try {
            if (p.waitFor() != 0) {
                throw new IOException("keytool " + args[0] + " failed: " + out.strip());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted running keytool " + args[0], e);
        }
    }

    /** The subject alternative names: localhost, 127.0.0.1 and each of {@code hosts} as an address or a name. */
    static String sans(List<String> hosts) {
        java.util.LinkedHashSet<String> names = new java.util.LinkedHashSet<>(List.of("dns:localhost", "ip:127.0.0.1"));
        for (String h : hosts) {
            names.add((h.matches("[0-9.]+") || h.contains(":") ? "ip:" : "dns:") + h);
        }
        return String.join(",", names);
    }
}
