package dev.stoker.node.launch;

import dev.stoker.node.ConfigException;
import dev.stoker.pipeline.feed.RankRange;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * The job's world as this node sees it: {@code ranks} in all, {@code local} on this node, and where each figure came
 * from ({@code how}, for the log). A job script gives it as {@code --nnodes N --node-rank I --nproc-per-node P}, or SLURM
 * does ({@code $SLURM_NNODES}, {@code $SLURM_NODEID}, {@code $SLURM_NTASKS_PER_NODE} else {@code $SLURM_GPUS_ON_NODE});
 * node I then serves ranks {@code I*P .. I*P+P-1} of {@code N*P}.
 */
public record JobWorld(int ranks, RankRange local, String how) {
    /** SLURM writes per-node counts of uneven allocations as "2(x3),1": the first node's count is this form's first number. */
    private static final Pattern LEADING_NUMBER = Pattern.compile("^\\s*(\\d+)");

    /**
     * The world from the options (null: not given) and, for those not given, SLURM's variables in {@code env}; null when
     * neither gives a world (then {@code --ranks}/{@code --local-ranks} or serve's defaults apply).
     */
    public static JobWorld resolve(Integer nnodes, Integer nodeRank, Integer nproc, Map<String, String> env) {
        var how = new ArrayList<String>();
        int n = pick("--nnodes", nnodes, env, List.of("SLURM_NNODES"), 1, how);
        int i = pick("--node-rank", nodeRank, env, List.of("SLURM_NODEID"), 0, how);
        int p = pick("--nproc-per-node", nproc, env, List.of("SLURM_NTASKS_PER_NODE", "SLURM_GPUS_ON_NODE"), -1, how);
        if (p < 0) {
            if (nnodes != null || nodeRank != null || how.stream().anyMatch(h -> h.contains("SLURM_")))
                throw new ConfigException("--nproc-per-node is required (ranks per node; under SLURM, $SLURM_NTASKS_PER_NODE or "
                        + "$SLURM_GPUS_ON_NODE gives it)");
            return null;
        }
        if (n < 1) throw new ConfigException("--nnodes must be at least 1, got " + n);
        if (p < 1) throw new ConfigException("--nproc-per-node must be at least 1, got " + p);
        if (i < 0 || i >= n) throw new ConfigException("--node-rank must be between 0 and " + (n - 1) + " (--nnodes " + n + "), got " + i);
        if ((long) n * p > 1 << 16)
            throw new ConfigException("--nnodes × --nproc-per-node is " + (long) n * p + " ranks, more than " + (1 << 16));
        return new JobWorld(n * p, new RankRange(i * p, i * p + p - 1), String.join(", ", how));
    }

    /** The option's value, else the first of {@code vars} set in {@code env}, else {@code fallback}; notes which in {@code how}. */
    private static int pick(String option, Integer given, Map<String, String> env, List<String> vars, int fallback, List<String> how) {
        if (given != null) {
            how.add(option + " " + given);
            return given;
        }
        for (String v : vars) {
            String text = env.get(v);
            if (text == null || text.isBlank()) continue;
            var m = LEADING_NUMBER.matcher(text);
            if (!m.find()) throw new ConfigException("$" + v + " is '" + text + "', not a number; give " + option);
            int value = Integer.parseInt(m.group(1));
            how.add(option + " " + value + " from $" + v);
            return value;
        }
        if (fallback >= 0) how.add(option + " " + fallback + " (default)");
        return fallback;
    }
}
