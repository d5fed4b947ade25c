"""lingpipe: GPipe pipeline parallelism in a Lingvo-style TensorFlow 2 layer framework."""

import setuptools

# params/ and tasks/ live at the top of the repository (as in Lingvo) but install as lingpipe.params and
# lingpipe.tasks, so nothing generic lands in site-packages.
_TOP = ('params', 'tasks')
_packages = [p for p in setuptools.find_packages(exclude=('tests', 'tests.*', 'tools', 'tools.*') + _TOP + tuple(
    t + '.*' for t in _TOP))]
for top in _TOP:
  _packages += ['lingpipe.' + p for p in setuptools.find_packages(include=(top, top + '.*'))]

setuptools.setup(
    name='lingpipe',
    version='0.1.0',
    description='GPipe pipeline parallelism in a Lingvo-style TensorFlow 2 layer framework.',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    python_requires='>=3.10',
    packages=_packages,
    package_dir={'lingpipe.params': 'params', 'lingpipe.tasks': 'tasks'},
    package_data={'lingpipe.tasks': ['*/data/*', '*/data/**/*']},
    install_requires=[
        'absl-py>=2.0',
        'numpy>=1.26',
        # Imported directly (lingpipe/keras, the Keras pipelines); TensorFlow 2.21 brings Keras 3, whose next major
        # version may move the few private modules lingpipe/keras names (each says why in a comment).
        'keras>=3.12,<4',
        # Imported directly: checkpoints' text format and the SavedModel's messages (logdir/checkpointer.py,
        # exporter.py); the range TensorFlow 2.21 accepts.
        'protobuf>=6.31.1,<8',
        'sentencepiece>=0.2',
        # BLEU with a reproducible signature (--mode=decode of the MT task).
        'sacrebleu>=2.4',
        # TensorBoard provides the tf.summary ops the trainer writes; tensorflow-cpu does not pull it in.
        'tensorboard>=2.21,<2.22',
    ],
    extras_require={
        # TensorFlow is an extra so that CPU and GPU users pick their build.
        'cpu': ['tensorflow-cpu>=2.21,<2.22'],
        'gpu': ['tensorflow[and-cuda]>=2.21,<2.22'],
        # matplotlib draws the pipeline timeline (--mode=profile, benchmarks/pipeline_timeline.py): axes, lanes and
        # labels we would otherwise write ourselves; only imported when a chart is drawn (the tests draw some).
        # pytest-xdist runs the suite in two processes: its tests keep one core busy each, so the README's test
        # command takes about half the time on 2 cores.
        'charts': ['matplotlib>=3.8'],
        'test': ['pytest>=8', 'pytest-xdist>=3.5', 'matplotlib>=3.8'],
    },
    entry_points={'console_scripts': ['lingpipe-train=lingpipe.trainer:Main', 'lingpipe-worker=lingpipe.worker:Main']},
)
