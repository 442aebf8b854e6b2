"""stoker.integrations without the frameworks: the state file, StokerDataset's consumption tracking and resume
over the fake service, the DataLoader it is iterated through, lazy imports, and the Trainer mixin's and
Lightning data module's wiring against minimal stand-ins of the framework classes they extend (the real
frameworks are exercised by tools/glue-check, which CI does not run)."""

import gc
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import types
import unittest
import warnings
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    from torch.utils.data import DataLoader
except ImportError:  # pragma: no cover
    torch = None

from stoker import Loader, StokerError  # noqa: E402
from stoker.integrations import MAX_STATE_BYTES, STATE_FILE, read_state, write_state  # noqa: E402
from fake_service import FakeService, make_batches  # noqa: E402
from test_loader import ServiceTest  # noqa: E402

CLIENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATE = {"job": "sft", "rank": 1, "world_size": 4, "fingerprint": (1 << 64) - 3, "epoch": 2, "position": 77,
         "next_step": 123, "sources": [{"epoch": 2, "position": 77}]}


class StateFileTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def test_round_trip(self):
        for state in (STATE, None):
            with self.subTest(state=state):
                path = write_state(self.dir, state)
                self.assertEqual(path, os.path.join(self.dir, STATE_FILE))
                self.assertEqual(read_state(self.dir), state)
                self.assertEqual(os.listdir(self.dir), [STATE_FILE], "no temporary file left behind")

    def test_rewrite_replaces_the_file(self):
        write_state(self.dir, STATE)
        later = dict(STATE, position=99, next_step=124)
        write_state(self.dir, later)
        self.assertEqual(read_state(self.dir), later)

    def test_missing_file_is_an_error_not_a_fresh_start(self):
        with self.assertRaises(FileNotFoundError) as cm:
            read_state(self.dir)
        self.assertIn(STATE_FILE, str(cm.exception))
        self.assertIn("restart the data", str(cm.exception))

    def test_missing_folder_is_not_created(self):
        folder = os.path.join(self.dir, "checkpoint-7")
        with self.assertRaises(FileNotFoundError):
            write_state(folder, STATE)
        self.assertFalse(os.path.exists(folder))

    def test_refuses_what_is_not_a_state(self):
        cases = {
            "not json": b"{nope",
            "another format": json.dumps({"format": "other", "version": 1, "state": STATE}).encode(),
            "another version": json.dumps({"format": "stoker-loader-state", "version": 2, "state": STATE}).encode(),
            "a list": json.dumps({"format": "stoker-loader-state", "version": 1, "state": [1]}).encode(),
            "too large": b" " * (MAX_STATE_BYTES + 1),
        }
        for label, data in cases.items():
            with self.subTest(label):
                with open(os.path.join(self.dir, STATE_FILE), "wb") as f:
                    f.write(data)
                with self.assertRaises(ValueError):
                    read_state(self.dir)

    def test_write_refuses_a_non_dict(self):
        with self.assertRaises(TypeError):
            write_state(self.dir, [1, 2])
        self.assertEqual(os.listdir(self.dir), [])


class LazyImportTest(unittest.TestCase):
    def test_import_needs_no_torch_nor_framework(self):
        """With torch, transformers and lightning made unimportable, `import stoker` and `stoker.integrations`
        (and its state file functions) still work; the glue's names fail only when asked for."""
        code = textwrap.dedent(f"""
            import sys
            class Block:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] in ("torch", "transformers", "lightning", "pytorch_lightning", "accelerate"):
                        raise ImportError("blocked: " + name)
            sys.meta_path.insert(0, Block())
            sys.path.insert(0, {CLIENT!r})
            import stoker, stoker.integrations
            from stoker.integrations import STATE_FILE, read_state, write_state
            assert STATE_FILE == "stoker_loader.json"
            for name in ("StokerDataset", "StokerTrainer", "StokerDataModule"):
                try:
                    getattr(stoker.integrations, name)
                except ImportError as e:
                    print(name, "ImportError", e)
            assert not any(m.split(".")[0] in ("torch", "transformers", "lightning") for m in sys.modules)
            print("ok")
        """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[-1], "ok")
        self.assertEqual([line.split()[:2] for line in lines[:-1]],
                         [["StokerDataset", "ImportError"], ["StokerTrainer", "ImportError"],
                          ["StokerDataModule", "ImportError"]])

    def test_unknown_name(self):
        import stoker.integrations
        with self.assertRaises(AttributeError):
            stoker.integrations.NoSuchThing


def _quiet():
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore", UserWarning)  # torch: "The given NumPy array is not writable"
    return w


@unittest.skipIf(torch is None, "torch is not installed")
class StokerDatasetTest(ServiceTest):
    def setUp(self):
        super().setUp()
        self.addCleanup(_quiet().__exit__, None, None, None)

    def dataset(self, svc, **kw):
        from stoker.integrations import StokerDataset
        return StokerDataset.from_socket(svc.path, rank=0, world_size=1, **kw)

    def test_dataloader_yields_each_batch_as_it_is(self):
        from stoker.integrations import stoker_dataloader
        batches = make_batches(4)
        for delivery in ("copy", "shm"):
            with self.subTest(delivery=delivery):
                svc = self.service(batches, delivery=delivery)
                ds = self.dataset(svc)
                dl = stoker_dataloader(ds)
                self.assertIsNone(dl.batch_size)
                self.assertEqual(dl.num_workers, 0)
                got = list(dl)
                self.assertEqual(len(got), 4)
                for g, e in zip(got, batches):
                    self.assertBatchEqual(g, e)  # same names, dtypes, shapes (no leading 1), values
                del got, g
                self.assertTrue(svc.wait_done())
                self.assertEqual(svc.kinds(1)[-1], "BYE", "the factory's loader is closed at the end of the feed")
                svc.close()
                os.unlink(svc.path)

    def test_a_transform_sees_each_batch_with_its_own_metadata(self):
        """A framework fetching ahead still hands the adapter the metadata of the batch it transforms."""
        batches = make_batches(4)
        svc = self.service(batches)
        seen = []

        def transform(batch, meta):
            seen.append(int(meta.step))
            return {"step": meta.step, **batch}

        ds = self.dataset(svc).with_transform(transform)
        got = list(iter(ds))
        self.assertEqual([int(g["step"]) for g in got], seen)
        self.assertEqual(seen, sorted(seen))
        self.assertEqual(len(set(seen)), 4, seen)
        with self.assertRaises(TypeError):
            ds.with_transform(3)
        del got

    def test_without_tracking_the_state_is_the_loaders(self):
        svc = self.service(make_batches(5))
        ds = self.dataset(svc)
        self.assertIsNone(ds.state_dict(), "no loader yet, nothing loaded")
        it = iter(ds)
        for i in range(3):
            next(it)
            self.assertEqual(ds.state_dict(), ds.loader.state_dict())
            self.assertEqual((ds.state_dict()["position"], ds.state_dict()["next_step"]), (i + 1, i + 1))
        with self.assertRaisesRegex(StokerError, "track_consumption"):
            ds.consumed()

    def test_tracking_saves_the_state_after_the_last_consumed_batch(self):
        """A framework fetching ahead: the loader has yielded three batches, the step trained on one."""
        batches = make_batches(6)
        svc = self.service(batches)
        ds = self.dataset(svc).track_consumption()
        it = iter(stoker_dl(ds))
        next(it)
        start = ds.state_dict()
        self.assertEqual((start["position"], start["next_step"], start["fingerprint"]), (0, 0, 0xF00D),
                         "before any consumed batch: where the connection started, with the job's fingerprint")
        next(it), next(it)
        self.assertEqual(ds.loader.state_dict()["next_step"], 3)
        ds.consumed()
        self.assertEqual(ds.state_dict()["next_step"], 1)
        self.assertEqual(ds.consumed_meta.global_step, 0)
        self.assertEqual(list(ds.consumed_meta.sample_index), list(batches[0]["sample_index"]))
        ds.consumed(2)
        self.assertEqual((ds.state_dict()["position"], ds.state_dict()["next_step"]), (3, 3))
        self.assertEqual(ds.consumed_batches, 3)
        with self.assertRaisesRegex(StokerError, "never yielded"):
            ds.consumed()

    def test_resume_continues_after_the_last_consumed_batch(self):
        """Train with one batch in hand (as Lightning does), checkpoint after step k, restart the service and
        the trainer: the resumed feed's first batch is step k + 1's, and together the two runs hold every batch
        once."""
        batches = make_batches(8)
        svc = self.service(batches)
        ds = self.dataset(svc).track_consumption()
        it = iter(stoker_dl(ds))
        trained, ahead = [], next(it)
        for _ in range(3):
            batch, ahead = ahead, next(it)          # the next batch is fetched before this one's step
            ds.consumed()
            trained.append(batch)
        saved = json.loads(json.dumps(ds.state_dict()))  # through JSON, as the checkpoint file keeps it
        self.assertEqual(ds.loader.batches, 4)
        self.assertEqual(saved["next_step"], 3)
        del it, ahead, batch
        gc.collect()
        svc.close()
        os.unlink(svc.path)

        svc2 = self.service(batches)  # a fresh service, as after a restart
        ds2 = self.dataset(svc2).track_consumption()
        ds2.load_state_dict(saved)
        self.assertEqual(ds2.state_dict(), saved, "a loaded state is what the dataset reports until it moves")
        for batch in stoker_dl(ds2):
            ds2.consumed()
            trained.append(batch)
        self.assertEqual(svc2.hellos[0]["resume_step"], 3)
        self.assertEqual(len(trained), len(batches))
        for got, expected in zip(trained, batches):
            self.assertBatchEqual(got, expected)

    def test_a_given_loader_is_iterated_and_left_open(self):
        from stoker.integrations import StokerDataset
        batches = make_batches(3)
        svc = self.service(batches)
        with Loader(svc.path, 0, 1, job="given", as_torch=True) as loader:
            ds = StokerDataset(loader)
            got = list(stoker_dl(ds))
            self.assertEqual(len(got), 3)
            self.assertIs(ds.loader, loader)
            self.assertEqual(list(stoker_dl(ds)), [], "a Loader after END yields nothing more")
            self.assertNotIn("BYE", svc.kinds(1), "not closed by the dataset")
            with self.assertRaisesRegex(ValueError, "cannot resume job"):
                ds.load_state_dict(dict(STATE, job="other"))
        self.assertTrue(svc.wait_done())

    def test_a_factory_result_must_be_a_loader(self):
        from stoker.integrations import StokerDataset
        with self.assertRaisesRegex(TypeError, "not a Loader"):
            next(iter(StokerDataset(lambda: "socket")))
        with self.assertRaisesRegex(TypeError, "a Loader or a callable"):
            StokerDataset("socket")

    def test_rank_and_world_from_the_environment(self):
        from stoker.integrations import StokerDataset
        svc = self.service(make_batches(2))
        with mock.patch.dict(os.environ, {"RANK": "1", "WORLD_SIZE": "2"}):
            ds = StokerDataset.from_socket(svc.path, job="envjob")
            it = iter(ds)
            next(it)
            it.close()
        self.assertEqual((svc.hellos[0]["rank"], svc.hellos[0]["world"], svc.hellos[0]["job"]), (1, 2, "envjob"))

    def test_from_env_reads_torchruns_and_stokers_variables_at_each_iteration(self):
        from stoker.integrations import StokerDataset
        svc = self.service(make_batches(2))
        ds = StokerDataset.from_env(connect_timeout=5)
        env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "STOKER_SOCKET": svc.path, "STOKER_JOB": "envjob"}
        with mock.patch.dict(os.environ, env):  # set after the dataset was made, as a launcher's may be
            it = iter(ds)
            next(it)
            self.assertTrue(ds.loader.as_torch)
            it.close()
        self.assertEqual((svc.hellos[0]["rank"], svc.hellos[0]["world"], svc.hellos[0]["job"]), (1, 2, "envjob"))

    def test_a_worker_is_refused(self):
        svc = self.service(make_batches(3))
        ds = self.dataset(svc)
        with self.assertRaisesRegex(StokerError, "num_workers=0"):
            next(iter(DataLoader(ds, batch_size=None, num_workers=1)))
        self.assertEqual(svc.hellos, [])
        self.assertIsNone(ds.state_dict())

    def test_nothing_marking_consumption_is_caught(self):
        import stoker.integrations.dataset as dataset
        svc = self.service(make_batches(6))
        ds = self.dataset(svc).track_consumption()
        with mock.patch.object(dataset, "MAX_AHEAD", 2):
            it = iter(ds)
            next(it), next(it)
            with self.assertRaisesRegex(StokerError, "none was marked consumed"):
                next(it)

    def test_load_none_loads_nothing(self):
        svc = self.service(make_batches(2))
        ds = self.dataset(svc).track_consumption()
        ds.load_state_dict(None)
        next(iter(ds))
        self.assertEqual(svc.hellos[0]["flags"] & 2, 0, "no resume")


def stoker_dl(ds):
    from stoker.integrations import stoker_dataloader
    return stoker_dataloader(ds)


# ---------------------------------------------------------------------- framework stand-ins

class _FakeTrainer:
    """The few things of transformers.Trainer the mixin relies on, as 4.57 and 5.x have them."""

    def __init__(self, model=None, args=None, data_collator=None, train_dataset=None, **kw):
        self.model, self.args, self.train_dataset = model, args, train_dataset
        self.callbacks = []
        self.trained = []

    def add_callback(self, cb):
        self.callbacks.append(cb)

    def get_train_dataloader(self):
        raise AssertionError("the stock get_train_dataloader must not be used for a Stoker feed")

    def training_step(self, model, inputs, num_items_in_batch=None):
        return torch.tensor(float(inputs["input_ids"].sum()))

    def train(self, resume_from_checkpoint=None, trial=None, **kw):
        """A run of args.max_steps steps, saving a checkpoint every args.save_steps, as the Trainer's loop does."""
        self.trained.append(resume_from_checkpoint)
        step = 0
        if resume_from_checkpoint is True:  # as the Trainer does: the output folder's last checkpoint
            resume_from_checkpoint = sys.modules["transformers.trainer_utils"].get_last_checkpoint(self.args.output_dir)
        if resume_from_checkpoint:
            step = int(os.path.basename(resume_from_checkpoint).split("-")[1])
        it = iter(self.get_train_dataloader())
        while step < self.args.max_steps:
            self.training_step(self.model, next(it))
            step += 1
            if step % self.args.save_steps == 0:
                os.makedirs(os.path.join(self.args.output_dir, f"checkpoint-{step}"))
                state = types.SimpleNamespace(global_step=step)
                for cb in self.callbacks:
                    cb.on_save(self.args, state, None)


def _fake_transformers():
    tf = types.ModuleType("transformers")
    tf.Trainer = _FakeTrainer
    tf.TrainerCallback = type("TrainerCallback", (), {})
    utils = types.ModuleType("transformers.trainer_utils")
    utils.PREFIX_CHECKPOINT_DIR = "checkpoint"

    def get_last_checkpoint(folder):
        runs = [d for d in os.listdir(folder) if d.startswith("checkpoint-")]
        return os.path.join(folder, max(runs, key=lambda d: int(d.split("-")[1]))) if runs else None
    utils.get_last_checkpoint = get_last_checkpoint
    tf.trainer_utils = utils
    return {"transformers": tf, "transformers.trainer_utils": utils}


def _args(out, **kw):
    base = dict(output_dir=out, max_steps=4, save_steps=2, dataloader_num_workers=0, dataloader_pin_memory=True,
                ignore_data_skip=False, should_save=True)
    base.update(kw)
    return types.SimpleNamespace(**base)


@unittest.skipIf(torch is None, "torch is not installed")
class TrainerMixinWiringTest(ServiceTest):
    def setUp(self):
        super().setUp()
        self.addCleanup(_quiet().__exit__, None, None, None)
        patcher = mock.patch.dict(sys.modules, _fake_transformers())
        patcher.start()
        self.addCleanup(patcher.stop)
        sys.modules.pop("stoker.integrations.hf", None)
        self.addCleanup(sys.modules.pop, "stoker.integrations.hf", None)
        from stoker.integrations import hf
        self.hf = hf

    def test_checkpoint_holds_the_state_and_resume_loads_it(self):
        batches = make_batches(8)
        out = os.path.join(self.tmp, "out")
        os.makedirs(out)
        svc = self.service(batches)
        factory = lambda: Loader(svc.path, 0, 1, as_torch=True)  # noqa: E731
        t = self.hf.StokerTrainer(model=None, args=_args(out), train_dataset=factory)
        self.assertIsInstance(t.train_dataset, self.hf.StokerDataset)
        self.assertTrue(t.args.ignore_data_skip, "the Trainer's own skip would draw from the resumed loader")
        dl = t.get_train_dataloader()
        self.assertIsNone(dl.batch_size)
        t.train()
        self.assertEqual(sorted(os.listdir(out)), ["checkpoint-2", "checkpoint-4"])
        self.assertEqual(read_state(os.path.join(out, "checkpoint-2"))["next_step"], 2)
        self.assertEqual(read_state(os.path.join(out, "checkpoint-4"))["next_step"], 4)
        svc.close()
        os.unlink(svc.path)

        svc2 = self.service(batches)
        t2 = self.hf.StokerTrainer(None, _args(out, max_steps=6), None, lambda: Loader(svc2.path, 0, 1, as_torch=True))
        self.assertIsInstance(t2.train_dataset, self.hf.StokerDataset, "train_dataset given by position")
        t2.train(resume_from_checkpoint=True)  # the last checkpoint: checkpoint-4
        self.assertEqual(t2.trained, [True], "the Trainer gets the argument as it was given")
        self.assertEqual(svc2.hellos[0]["resume_step"], 4)
        self.assertEqual(read_state(os.path.join(out, "checkpoint-6"))["next_step"], 6)

    def test_resume_from_a_checkpoint_without_state_fails(self):
        out = os.path.join(self.tmp, "out")
        os.makedirs(os.path.join(out, "checkpoint-2"))
        t = self.hf.StokerTrainer(model=None, args=_args(out), train_dataset=lambda: None)
        with self.assertRaises(FileNotFoundError):
            t.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
        self.assertEqual(t.trained, [], "the Trainer never started")

    def test_workers_are_refused(self):
        with self.assertRaisesRegex(ValueError, "dataloader_num_workers=2"):
            self.hf.StokerTrainer(model=None, args=_args(self.tmp, dataloader_num_workers=2),
                                  train_dataset=lambda: None)

    def test_other_datasets_take_the_trainers_path(self):
        t = self.hf.StokerTrainer(model=None, args=_args(self.tmp), train_dataset=[1, 2, 3])
        self.assertIsNone(t.stoker_dataset)
        self.assertEqual(t.callbacks, [])
        self.assertFalse(t.args.ignore_data_skip)
        with self.assertRaisesRegex(AssertionError, "stock get_train_dataloader"):
            t.get_train_dataloader()

    def test_only_saving_processes_write(self):
        out = os.path.join(self.tmp, "out")
        os.makedirs(os.path.join(out, "checkpoint-2"))
        t = self.hf.StokerTrainer(model=None, args=_args(out, should_save=False), train_dataset=lambda: None)
        t.callbacks[0].on_save(t.args, types.SimpleNamespace(global_step=2), None)
        self.assertEqual(os.listdir(os.path.join(out, "checkpoint-2")), [])


class _FakeDataModule:
    def __init__(self):
        self.trainer = None


@unittest.skipIf(torch is None, "torch is not installed")
class DataModuleWiringTest(ServiceTest):
    def setUp(self):
        super().setUp()
        self.addCleanup(_quiet().__exit__, None, None, None)
        pl = types.ModuleType("lightning.pytorch")
        pl.LightningDataModule = _FakeDataModule
        lightning = types.ModuleType("lightning")
        lightning.pytorch = pl
        patcher = mock.patch.dict(sys.modules, {"lightning": lightning, "lightning.pytorch": pl})
        patcher.start()
        self.addCleanup(patcher.stop)
        sys.modules.pop("stoker.integrations.lightning", None)
        self.addCleanup(sys.modules.pop, "stoker.integrations.lightning", None)
        from stoker.integrations.lightning import STATE_KEY, StokerDataModule
        self.StokerDataModule, self.key = StokerDataModule, STATE_KEY

    def test_training_batches_count_as_consumed_and_resume(self):
        batches = make_batches(6)
        svc = self.service(batches)
        dm = self.StokerDataModule(lambda: Loader(svc.path, 0, 1, as_torch=True))
        self.assertEqual(dm.state_dict(), {}, "nothing to save before the first connection")
        dm.trainer = types.SimpleNamespace(training=True)
        dl = dm.train_dataloader()
        self.assertIsNone(dl.batch_size)
        it = iter(dl)
        ahead = next(it)
        for _ in range(2):  # Lightning's fit loop: one batch in hand
            batch, ahead = dm.on_before_batch_transfer(ahead, 0), next(it)
        dm.trainer.training = False  # a validation batch of the module's own loader is not ours
        dm.on_before_batch_transfer({"x": 1}, 0)
        saved = dm.state_dict()
        self.assertEqual(saved[self.key]["next_step"], 2)
        self.assertEqual(dm.dataset.loader.batches, 3)
        del it, ahead, batch
        gc.collect()
        svc.close()
        os.unlink(svc.path)

        svc2 = self.service(batches)
        dm2 = self.StokerDataModule(lambda: Loader(svc2.path, 0, 1, as_torch=True))
        dm2.load_state_dict(saved)
        first = next(iter(dm2.train_dataloader()))
        self.assertBatchEqual(first, batches[2])
        self.assertEqual(svc2.hellos[0]["resume_step"], 2)


if __name__ == "__main__":
    unittest.main()
