package io.orbitkv.pd.broker;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A secured development cluster: clients connect with SASL SCRAM-SHA-512 over TLS, every request is authorized by
 * KRaft's {@code StandardAuthorizer} (nothing allowed without an ACL), and {@code adminUser} is the one super user
 * (created when the storage is formatted, so it exists before the first broker starts). Other principals are created
 * by the admin ({@code Admin.alterUserScramCredentials}) with their ACLs ({@code ./orbitkv-pd acls}).
 *
 * <p>The controller listener stays plaintext on loopback, its principal {@code ANONYMOUS} a super user as KRaft's
 * brokers and controllers need: it is reachable only from this machine. A production cluster secures that listener too.
 *
 * @param tls           the CA and the broker's certificate
 * @param adminUser     the super user's name
 * @param adminPassword its password
 */
public record BrokerSecurity(TlsMaterial tls, String adminUser, String adminPassword) {

    /** The SASL mechanism of every client. */
    public static final String MECHANISM = "SCRAM-SHA-512";

    public BrokerSecurity {
        if (tls == null) {
            throw new IllegalArgumentException("tls: required");
        }
        if (adminUser == null || !adminUser.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("adminUser: letters, digits, '.', '_' and '-' only, got " + adminUser);
        }
        if (adminPassword == null || adminPassword.length() < 8 || adminPassword.contains("\"") || adminPassword.contains(",")
                || adminPassword.contains("]")) {
            throw new IllegalArgumentException("adminPassword: at least 8 characters, none of '\"', ',' or ']'");
        }
    }

    /**
     * The client settings that connect as {@code user}: SASL_SSL, SCRAM-SHA-512, and the CA as the truststore. The same
     * keys a component's config takes under {@code kafka.} ({@code kafka.security.protocol=SASL_SSL}, ...).
     */
    public Map<String, Object> clientConfig(String user, String password) {
        Map<String, Object> c = new LinkedHashMap<>();
        c.put("security.protocol", "SASL_SSL");
        c.put("sasl.mechanism", MECHANISM);
        c.put("sasl.jaas.config", jaas(user, password));
        c.put("ssl.truststore.location", tls.truststore().toString());
        c.put("ssl.truststore.password", tls.password());
        c.put("ssl.truststore.type", TlsMaterial.STORE_TYPE);
        return c;
    }

    /** {@link #clientConfig} for the super user. */
    public Map<String, Object> adminClientConfig() {
        return clientConfig(adminUser, adminPassword);
    }

    /** The JAAS line of a SCRAM login. */
    public static String jaas(String user, String password) {
        return "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"" + user + "\" password=\"" + password + "\";";
    }

    /** {@code kafka-storage format --add-scram}'s argument for the super user. */
    String scramBootstrap() {
        return MECHANISM + "=[name=" + adminUser + ",password=" + adminPassword + "]";
    }

    /**
     * The broker's listeners and security settings for a node listening for clients on {@code client} (host:port) and
     * telling them {@code advertised}.
     */
    Map<String, String> serverProperties(String client, String advertised, String controller) {
        Map<String, String> p = new LinkedHashMap<>();
        p.put("listeners", "CLIENT://" + client + ",CONTROLLER://" + controller);
        p.put("advertised.listeners", "CLIENT://" + advertised);
        p.put("listener.security.protocol.map", "CLIENT:SASL_SSL,CONTROLLER:PLAINTEXT");
        p.put("inter.broker.listener.name", "CLIENT");
        p.put("sasl.enabled.mechanisms", MECHANISM);
        p.put("sasl.mechanism.inter.broker.protocol", MECHANISM);
        p.put("listener.name.client.scram-sha-512.sasl.jaas.config", jaas(adminUser, adminPassword));
        p.put("ssl.keystore.location", tls.keystore().toString());
        p.put("ssl.keystore.password", tls.password());
        p.put("ssl.key.password", tls.password());
        p.put("ssl.keystore.type", TlsMaterial.STORE_TYPE);
        p.put("ssl.truststore.location", tls.truststore().toString());
        p.put("ssl.truststore.password", tls.password());
        p.put("ssl.truststore.type", TlsMaterial.STORE_TYPE);
        p.put("authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer");
        p.put("allow.everyone.if.no.acl.found", "false");
        p.put("super.users", "User:" + adminUser + ";User:ANONYMOUS");
        return p;
    }
}
