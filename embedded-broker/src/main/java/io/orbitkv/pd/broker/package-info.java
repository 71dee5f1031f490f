/**
 * Real Apache Kafka (KRaft) brokers for tests and local development, run as child JVMs from the Maven Central
 * jars: {@link io.orbitkv.pd.broker.KraftCluster} (1..n nodes, fault injection) and
 * {@link io.orbitkv.pd.broker.DevBroker} (persistent single node on a fixed port). No Docker, no downloads.
 */
package io.orbitkv.pd.broker;
