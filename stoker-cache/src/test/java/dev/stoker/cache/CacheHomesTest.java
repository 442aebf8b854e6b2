package dev.stoker.cache;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Rendezvous homes: the same on every member, spread evenly, and only ~1/N of them move when a member joins or leaves. */
@Timeout(60)
class CacheHomesTest {
    private static final int KEYS = 20_000;

    private static List<CacheHomes.Member> members(int n) {
        var out = new ArrayList<CacheHomes.Member>();
        for (int i = 0; i < n; i++) out.add(new CacheHomes.Member("pekko://stoker@10.0.0." + (i + 1) + ":2551", "10.0.0." + (i + 1), 4000 + i));
        return out;
    }

    private static CacheKey key(int i) { return CacheKey.of("image-resized-u8", "s", CacheKey.sha256(("image " + i).getBytes())); }

    private static Map<Integer, String> homes(CacheHomes h) {
        var out = new HashMap<Integer, String>();
        for (int i = 0; i < KEYS; i++) out.put(i, h.home(key(i)).name());
        return out;
    }

    @Test
    void everyMemberComputesTheSameHomesWhateverTheOrderItListsThemIn() {
        var ms = members(3);
        var a = new CacheHomes(ms.get(0).name(), ms);
        var b = new CacheHomes(ms.get(2).name(), List.of(ms.get(2), ms.get(0), ms.get(1)));
        assertEquals(homes(a), homes(b));
        int here = 0;
        for (int i = 0; i < KEYS; i++) if (a.homedHere(key(i))) here++;
        assertTrue(Math.abs(here - KEYS / 3) < KEYS / 20, "member 0 is home of " + here + " of " + KEYS);
    }

    @Test
    void homesAreSpreadEvenlyOverFourMembers() {
        var counts = new HashMap<String, Integer>();
        for (var home : homes(new CacheHomes("x", members(4))).values()) counts.merge(home, 1, Integer::sum);
        assertEquals(4, counts.size());
        for (int c : counts.values()) assertTrue(Math.abs(c - KEYS / 4) < KEYS / 25, "share " + c + " of " + KEYS + ": " + counts);
    }

    @Test
    void aMemberLeavingMovesOnlyItsOwnEntriesAndOneJoiningTakesAboutAQuarter() {
        var four = homes(new CacheHomes("x", members(4)));
        var three = homes(new CacheHomes("x", members(3))); // the fourth left
        String gone = members(4).get(3).name();
        int moved = 0;
        for (int i = 0; i < KEYS; i++) {
            if (!four.get(i).equals(gone)) assertEquals(four.get(i), three.get(i), "key " + i + " moved though its home stayed");
            if (!four.get(i).equals(three.get(i))) moved++;
        }
        // the other way round: the fourth joined; it takes about 1/4 of the entries, each from its old home
        assertTrue(Math.abs(moved - KEYS / 4) < KEYS / 25, moved + " of " + KEYS + " moved");
    }

    @Test
    void noMembersMeansEveryEntryIsLocalAndNamesAreUnique() {
        var none = new CacheHomes("me", List.of());
        assertNull(none.home(key(1)));
        assertTrue(none.homedHere(key(1)));
        var m = members(1).get(0);
        assertThrows(IllegalArgumentException.class, () -> new CacheHomes("me", List.of(m, m)));
    }
}
