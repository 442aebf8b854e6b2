package dev.stoker.cluster;

/**
 * Marks every message that crosses between cluster nodes; Pekko serializes them with Jackson (CBOR),
 * bound in {@link ClusterNode}'s configuration. Records only, with typed actor references where a
 * reply is wanted.
 */
public interface ClusterMessage {}
