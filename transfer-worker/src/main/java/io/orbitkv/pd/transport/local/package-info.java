/** The {@code local} transport: both pools in one JVM, through the same admission rules; for tests and single-process setups. */
package io.orbitkv.pd.transport.local;
