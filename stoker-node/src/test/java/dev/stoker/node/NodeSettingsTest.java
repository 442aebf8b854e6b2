package dev.stoker.node;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The table of settings: each key found by its name, each in one group, the groups together the whole table in its
 * order, the help of each naming only options that exist, and the settings that need packing of the packing group.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class NodeSettingsTest {
    @Test
    void eachSettingIsFoundByItsNameAndTheGroupsTogetherAreTheTableInOrder() {
        for (var k : NodeSettings.keys()) assertSame(k, NodeSettings.key(k.name()), k.name());
        assertSame(NodeSettings.MAX_PIXELS, NodeConfig.MAX_PIXELS, "a configuration names the table's keys");
        assertNull(NodeSettings.key("--max-pixels"), "a name, not an option");
        var byGroups = new ArrayList<ConfigKey<?>>();
        for (var g : ConfigKey.Group.values()) {
            var of = NodeSettings.keys(NodeSettings.groups(g));
            assertFalse(of.isEmpty(), g + " has settings");
            for (var k : of) assertEquals(g, k.group());
            byGroups.addAll(of);
        }
        assertEquals(NodeSettings.keys().size(), byGroups.size(), "each setting in one group");
        assertEquals(NodeSettings.keys(), NodeSettings.keys(EnumSet.allOf(ConfigKey.Group.class)), "the table's order");
        assertEquals(List.of(NodeSettings.MODEL, NodeSettings.OVERRIDE_MODEL), NodeSettings.keys().subList(0, 2));
    }

    /** Help cannot send a user to an option that does not exist: every --name a setting's help or default names is a setting. */
    @Test
    void theHelpNamesOnlyOptionsThatExist() {
        var option = Pattern.compile("--([a-z][a-z0-9-]*[a-z0-9])(-\\*)?");
        for (var k : NodeSettings.keys()) {
            var m = option.matcher(k.doc() + " " + k.describeDefault());
            while (m.find()) {
                String name = m.group(1);
                if (m.group(2) != null) // a family of options: --cost-*
                    assertTrue(NodeSettings.keys().stream().anyMatch(o -> o.name().startsWith(name + "-")),
                            k.name() + "'s help names " + m.group() + ", which is no family of settings");
                else
                    assertTrue(NodeSettings.key(name) != null, k.name() + "'s help names " + m.group() + ", which is no setting");
            }
        }
    }

    @Test
    void theSettingsThatGoOnlyWithPackingAreDataSettingsThatSaySo() {
        assertTrue(NodeSettings.PACK_ONLY.contains(NodeSettings.PACK_PATCHES));
        assertTrue(NodeSettings.PACK_ONLY.contains(NodeSettings.COST_VIT_HIDDEN));
        assertFalse(NodeSettings.PACK_ONLY.contains(NodeSettings.PACK_TOKENS), "the switch itself");
        for (var k : NodeSettings.PACK_ONLY) {
            assertEquals(ConfigKey.Group.DATA, k.group(), k.name());
            assertTrue(k.doc().contains("--pack-tokens") || k.name().startsWith("cost-"), k.name() + "'s help says it goes with packing");
        }
    }
}
