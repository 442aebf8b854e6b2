package dev.stoker.cache;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Which member of a cluster job is the home of each cache entry: rendezvous (highest-random-weight) hashing of the
 * entry's key over the members' names. Every member computes the same home from the same list, whatever batch or pack
 * the entry's sample falls in and in every epoch; when a member joins or leaves, only the entries whose home it becomes
 * or was move (about 1/N of them), the others keep theirs.
 *
 * <p>The weight of member m for key k is a 64-bit mix of m's name hash and the key's first 8 bytes (the key is already a
 * SHA-256, uniform): one multiply-xorshift per member and entry, no digest.
 */
public final class CacheHomes {
    /** A member: its name (the cluster address, stable across a restart at the same address) and its Flight endpoint. */
    public record Member(String name, String host, int port) {
        public Member {
            if (name == null || name.isEmpty()) throw new IllegalArgumentException("a member needs a name");
        }
    }

    private final String self;
    private final List<Member> members;
    private final long[] seeds;

    /**
     * The homes over {@code members} (in any order; names unique) as member {@code self} sees them; {@code self} need not
     * be among them (a node that makes no samples is no home).
     */
    public CacheHomes(String self, List<Member> members) {
        this.self = self;
        var sorted = new ArrayList<>(members);
        sorted.sort(java.util.Comparator.comparing(Member::name));
        for (int i = 1; i < sorted.size(); i++)
            if (sorted.get(i).name().equals(sorted.get(i - 1).name())) throw new IllegalArgumentException("member " + sorted.get(i).name() + " twice");
        this.members = List.copyOf(sorted);
        this.seeds = new long[sorted.size()];
        for (int i = 0; i < seeds.length; i++) seeds[i] = nameHash(sorted.get(i).name());
    }

    public String self() { return self; }

    public List<Member> members() { return members; }

    /** The home of {@code key}: null when there are no members. */
    public Member home(CacheKey key) {
        if (seeds.length == 0) return null;
        return members.get(homeIndex(key.prefix64()));
    }

    /** Whether {@code key}'s home is this member (or there is no member at all: then every entry is local). */
    public boolean homedHere(CacheKey key) {
        var h = home(key);
        return h == null || h.name().equals(self);
    }

    /** The member named {@code name}, or null. */
    public Member member(String name) {
        for (var m : members) if (m.name().equals(name)) return m;
        return null;
    }

    int homeIndex(long keyBits) {
        int best = 0;
        long bestWeight = Long.MIN_VALUE;
        for (int i = 0; i < seeds.length; i++) {
            long w = mix(seeds[i] ^ keyBits);
            // unsigned order; ties (2^-64) go to the first in name order, the same on every member
            if (i == 0 || Long.compareUnsigned(w, bestWeight) > 0) {
                best = i;
                bestWeight = w;
            }
        }
        return best;
    }

    /** 64 bits of the SHA-256 of a member's name. */
    static long nameHash(String name) {
        byte[] d = CacheKey.sha256(name.getBytes(StandardCharsets.UTF_8));
        long v = 0;
        for (int i = 0; i < 8; i++) v = v << 8 | (d[i] & 0xff);
        return v;
    }

    /** SplitMix64's finalizer: every input bit reaches every output bit. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    @Override
    public String toString() { return "CacheHomes" + members.stream().map(Member::name).toList() + " self=" + self; }
}
