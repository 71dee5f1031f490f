package io.orbitkv.pd.cli;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.schemas.config.KafkaClients;
import io.orbitkv.pd.schemas.security.AclPlan;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.common.acl.AclBinding;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd acls}: each component's least-privilege ACLs, from the topic registry ({@link AclPlan}); printed,
 * or applied to a secured cluster as its admin, with the components' SCRAM users.
 */
@Command(name = "acls", mixinStandardHelpOptions = true,
        description = {"Prints each component's least-privilege ACLs (derived from the topic registry), or applies them with --apply.",
                "--config names the cluster and the admin's credentials (bootstrap.servers, kafka.security.protocol, kafka.sasl.*,",
                "kafka.ssl.*) and the topics (topics.prefix); decider.application.id and dashboard.application.id name the Streams apps."})
final class AclsCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties: the admin's connection (bootstrap.servers, kafka.*), topics.*, the apps' ids.")
    Path config;

    @Option(names = "--apply", description = "Create the ACLs (and the --user credentials) on the cluster, as the admin of --config.")
    boolean apply;

    @Option(names = "--principal", description = "A role's principal, role=User:name (roles: decider, worker, engine, proxy, dashboard, "
            + "log-tools; default User:orbitkv-<role>). Repeatable.")
    Map<String, String> principals = Map.of();

    @Option(names = "--user", description = "With --apply: create or update a SCRAM-SHA-512 user, name=password. Repeatable.")
    Map<String, String> users = Map.of();

    @Override
    public Integer call() throws Exception {
        ConfigProps p = ConfigProps.loadOrEmpty(config);
        Topics topics = new Topics(p.topics(), EventSerdes.embedded());
        Map<AclPlan.Role, String> who = new EnumMap<>(AclPlan.Role.class);
        who.putAll(AclPlan.defaultPrincipals());
        principals.forEach((role, principal) -> who.put(role(role), principal));
        AclPlan plan = new AclPlan(topics, p.string("decider.application.id", "orbitkv-decider"),
                p.string("dashboard.application.id", "orbitkv-dashboard"), who);
        List<AclBinding> all = new ArrayList<>();
        plan.bindings().forEach((role, bindings) -> {
            System.out.println("# " + role.key() + " (" + who.get(role) + ")");
            bindings.forEach(b -> System.out.println(AclPlan.describe(b)));
            all.addAll(bindings);
        });
        if (!apply) {
            return 0;
        }
        String bootstrap = p.required("bootstrap.servers");
        Map<String, Object> admin = KafkaClients.admin(bootstrap, p.withPrefix("kafka."));
        try (Admin a = Admin.create(admin)) {
            if (!users.isEmpty()) {
                List<UserScramCredentialAlteration> upserts = new ArrayList<>();
                users.forEach((name, password) -> upserts.add(new UserScramCredentialUpsertion(name,
                        new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), password)));
                a.alterUserScramCredentials(upserts).all().get(60, TimeUnit.SECONDS);
                System.out.println("users created or updated: " + String.join(", ", users.keySet()));
            }
            a.createAcls(all).all().get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            throw new IllegalStateException("applying ACLs as " + KafkaClients.principal(admin) + " on " + bootstrap + ": "
                    + e.getCause().getMessage(), e.getCause());
        }
        System.out.println("applied " + all.size() + " ACLs to " + bootstrap);
        return 0;
    }

    private static AclPlan.Role role(String key) {
        for (AclPlan.Role r : AclPlan.Role.values()) {
            if (r.key().equals(key)) {
                return r;
            }
        }
        throw new IllegalArgumentException("--principal: no role '" + key + "' (decider, worker, engine, proxy, dashboard, log-tools)");
    }
}
