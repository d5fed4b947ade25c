"""What lingpipe's console scripts (lingpipe-train, lingpipe-worker) share: a real --help, a quiet terminal, and
user errors as one line.

absl prints, for --help, the main module's docstring and the flags of the module named sys.argv[0]; a console
script's __main__ is a generated stub with neither, so `ShowHelpFor` lends it the binary module's. Unless --verbose,
`StartProcess` routes fd 2 through native_log's filter (the console scripts already did in lingpipe/__init__.py;
`python -m` lands here) and `QuietUnlessVerbose` silences TensorFlow's Python logger. main(argv) itself leaves
sys.stderr alone, so in-process callers (tests) capture it as usual.
"""

import os
import signal
import sys

from absl import flags
from absl import logging

FLAGS = flags.FLAGS


def ShowHelpFor(doc, module_name):
  """Makes --help print `doc` and the flags defined in `module_name`."""
  main_module = sys.modules.get('__main__')
  if main_module is not None and not (main_module.__doc__ or '').strip():
    main_module.__doc__ = doc
  for flag in FLAGS.get_key_flags_for_module(module_name):
    FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def SetUpConsoleScript(argv):
  """What a console script (lingpipe-train, lingpipe-worker) sets up as lingpipe is imported, before TensorFlow
  loads (lingpipe/__init__.py): _BeforeTensorFlow's, and unless --verbose, fd 2 filtered from the first line. The
  rest of the process's set-up is process_setup.SetUpProcess, which the binary's main makes."""
  from lingpipe import native_log  # pylint: disable=g-import-not-at-top
  _BeforeTensorFlow(argv, os.path.basename(argv[0]))
  if native_log.IsQuietBinary(argv):
    native_log.Filter()
    native_log.ImportTensorFlow()


def _BeforeTensorFlow(argv, name):
  """What a binary does before TensorFlow loads, once per process: TensorFlow's C++ INFO lines hidden and its oneDNN
  kernels on, each unless the user chose (cpu_kernels.py); and the process's memory budget (--memory_limit, or its
  cgroup's), applied then so that all TensorFlow allocates counts (memory/memory_budget.py)."""
  from lingpipe.core import cpu_kernels  # pylint: disable=g-import-not-at-top
  from lingpipe.memory import memory_budget  # pylint: disable=g-import-not-at-top
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')
  cpu_kernels.PreferOneDnn()
  if '--help' not in argv and '-h' not in argv:  # The trainer's guard is its parent: its line comes first.
    memory_budget.FromCommandLine(argv, name, supervise=name == 'lingpipe-train')


def StartProcess(doc, module_name):
  """What a binary's process entry point does before absl parses flags: --help text, _BeforeTensorFlow's
  choices, and the fd 2 filter (`python -m` lands here; a console script has made them in lingpipe/__init__.py)."""
  from lingpipe import native_log  # pylint: disable=g-import-not-at-top
  script = os.path.splitext(os.path.basename(sys.argv[0]))[0]  # 'trainer' under python -m lingpipe.trainer.
  _BeforeTensorFlow(sys.argv, {'trainer': 'lingpipe-train', 'worker': 'lingpipe-worker'}.get(script, script))
  ShowHelpFor(doc, module_name)
  if native_log.VerboseRequested(sys.argv):
    native_log.Close()
  else:
    native_log.Filter()


def QuietTool():
  """For scripts under tools/: TensorFlow's log lines off the terminal (TF_CPP_MIN_LOG_LEVEL=0 shows them). Call it
  first thing: start-up notices of a TensorFlow imported later are filtered too."""
  from lingpipe import native_log  # pylint: disable=g-import-not-at-top
  native_log.Filter()
  if native_log.IsFiltering():
    QuietUnlessVerbose(False)


def QuietUnlessVerbose(verbose):
  """Silences TensorFlow's and absl's Python loggers below ERROR, unless `verbose`."""
  if verbose:
    return
  logging.set_verbosity(logging.ERROR)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.get_logger().setLevel('ERROR')  # E.g. TensorFlow's retracing notices from its own checkpoint saver.


def RunUserErrorsAsOneLine(name, fn, verbose):
  """Runs fn() and gives exit status 0; a lingpipe UserError (or a file-system error naming its path) prints
  'name: error: ...' and gives 1 (with --verbose it is raised, traceback and all); Ctrl-C gives 130 and SIGTERM
  143, each with one line saying where the same command resumes."""
  from lingpipe.core import errors  # pylint: disable=g-import-not-at-top
  from lingpipe.runners import interrupt  # pylint: disable=g-import-not-at-top
  try:
    with interrupt.Catching(), interrupt.StoppingOnTerminate():
      fn()
    return 0
  except errors.UserError as e:
    if verbose:
      raise
    print('%s: error: %s' % (name, e), file=sys.stderr, flush=True)
    return 1
  except BrokenPipeError:
    # The reader of our output went away (`... | head`): stop quietly, as command-line tools do on SIGPIPE. Output
    # still buffered would fail again at exit, so stdout now goes nowhere.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141
  except interrupt.Terminated as e:
    print('%s: %s' % (name, e), file=sys.stderr, flush=True)
    return 128 + signal.SIGTERM
  except KeyboardInterrupt as e:
    if verbose:
      raise
    hint = str(e) if isinstance(e, interrupt.Interrupted) else ''
    print('%s: interrupted%s.' % (name, '; ' + hint if hint else ''), file=sys.stderr, flush=True)
    return 130
  except OSError as e:
    if verbose or not e.filename:
      raise
    # A file-system error that no lingpipe code turned into a sentence: still one line, with the path and cause.
    print('%s: error: cannot use %s: %s.' % (name, e.filename, e.strerror or e), file=sys.stderr, flush=True)
    return 1


def Exit(status):
  """Ends the process with `status`. After a Ctrl-C or SIGTERM (130, 143) without the interpreter's teardown:
  TensorFlow's threads (input pipelines, pending ops) may still run, and tearing the interpreter down under them
  can crash it (a Ctrl-C test once ended in SIGSEGV instead of 130 on a loaded machine). What must outlive the
  process was written atomically before; output is flushed here."""
  if status in (130, 128 + signal.SIGTERM):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # pylint: disable=protected-access
  sys.exit(status)


def CheckNoArguments(name, argv):
  """Exit status 2 with a one-line message when argv has positional arguments, else None."""
  if len(argv) > 1:
    print('%s: error: unexpected arguments %s (flags look like --name=value).' % (name, argv[1:]), file=sys.stderr)
    return 2
  return None
