package dev.stoker.testkit.netns;

import java.util.concurrent.CountDownLatch;

/**
 * A process that builds a bed, prints "TAG tag" and waits to be killed: {@link NetnsTestBedTest}
 * ends it by SIGTERM (the shutdown hook must remove the bed) or SIGKILL (the bed is left over).
 */
final class BedHolder {
    private BedHolder() {}

    public static void main(String[] args) throws Exception {
        NetnsTestBed bed = NetnsTestBed.create(Integer.parseInt(args[0]), Long.parseLong(args[1]), NetnsTestBed.Options.defaults());
        System.out.println("TAG " + bed.tag());
        new CountDownLatch(1).await();
    }
}
