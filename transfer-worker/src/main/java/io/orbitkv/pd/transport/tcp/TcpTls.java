package io.orbitkv.pd.transport.tcp;

import io.orbitkv.pd.schemas.config.ConfigProps;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * TLS on the tcp transport ({@code transfer.tcp.tls.*}): the receiver presents its certificate (a PKCS12 keystore),
 * the sender checks it against its truststore and the peer's advertised host. A worker both sends and receives, so it
 * takes both.
 *
 * @param keystore           this worker's key and certificate ({@code transfer.tcp.tls.keystore})
 * @param keystorePassword   ({@code transfer.tcp.tls.keystore-password})
 * @param truststore         the CA(s) peers' certificates are checked against ({@code transfer.tcp.tls.truststore})
 * @param truststorePassword ({@code transfer.tcp.tls.truststore-password})
 */
public record TcpTls(Path keystore, String keystorePassword, Path truststore, String truststorePassword) {

    /** The settings when {@code transfer.tcp.tls=true}, else null (plaintext). */
    static TcpTls from(ConfigProps p) {
        if (!p.bool("transfer.tcp.tls", false)) {
            return null;
        }
        return new TcpTls(Path.of(p.required("transfer.tcp.tls.keystore")), p.required("transfer.tcp.tls.keystore-password"),
                Path.of(p.required("transfer.tcp.tls.truststore")), p.required("transfer.tcp.tls.truststore-password"));
    }

    /**
     * The TLS context of these stores.
     *
     * @throws IllegalArgumentException naming the setting whose store cannot be read
     */
    public SSLContext context() {
        try {
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(load(keystore, keystorePassword, "transfer.tcp.tls.keystore"), keystorePassword.toCharArray());
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(load(truststore, truststorePassword, "transfer.tcp.tls.truststore"));
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf.getKeyManagers(), tmf.getTrustManagers(), null);
            return ctx;
        } catch (GeneralSecurityException e) {
            throw new IllegalArgumentException("transfer.tcp.tls: " + e.getMessage(), e);
        }
    }

    private static KeyStore load(Path file, String password, String key) {
        try (InputStream in = Files.newInputStream(file)) {
            KeyStore ks = KeyStore.getInstance("PKCS12");
            ks.load(in, password.toCharArray());
            return ks;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException(key + ": cannot read " + file + " as PKCS12: " + e.getMessage(), e);
        }
    }
}
