/**
 * Implementation of {@link io.orbitkv.pd.broker.KraftCluster}: child JVM command line, class path and logging,
 * the child's entry point and on-disk layout. Not API; may change without notice.
 */
package io.orbitkv.pd.broker.internal;
