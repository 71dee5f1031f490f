/**
 * Schema evolution tooling: {@link io.orbitkv.pd.schemas.compat.SchemaRelease} freezes the current public
 * contracts as a released version, and {@link io.orbitkv.pd.schemas.compat.CompatibilityChecker} holds every
 * later change to them (run by {@code SchemaCompatibilityTest} in every build). See {@code docs/schemas.md}.
 */
package io.orbitkv.pd.schemas.compat;
