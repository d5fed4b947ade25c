"""Optimizers with their slot variables, configured by Params and saved in checkpoints.

`Build(variables)` creates the slots eagerly (before any tf.function is traced); `Apply(grads, variables, lr)`
updates the variables. Slots are named after their variable, so checkpoints stay readable.
"""

import tensorflow as tf

from lingpipe.core import errors
from lingpipe.core import hyperparams
from lingpipe.core import param_checks


def _SlotKey(var):
  return var.name.split(':')[0].replace('/', '.')


class BaseOptimizer(tf.Module):
  """Holds per-variable slots; subclasses define `_SlotNames` and `_Update`."""

  _SLOTS = ()

  @classmethod
  def Params(cls):
    p = hyperparams.InstantiableParams(cls)
    p.Define('name', 'optimizer', 'Name of the optimizer (checkpoint prefix).')
    return p

  def __init__(self, params):
    super().__init__(name=params.name)
    self.params = params.Copy().Freeze()
    self.slots = {}
    self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name='%s/iterations' % params.name)

  def Build(self, variables):
    for var in variables:
      key = _SlotKey(var)
      if key in self.slots:
        continue
      with tf.device(var.device):  # Slots live beside their variable (its pipeline cell's device).
        self.slots[key] = {name: tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False,
                                             name='%s/%s/%s' % (self.params.name, key, name))
                           for name in self._SLOTS}
    return self

  def Apply(self, grads, variables, learning_rate):
    """Applies one update; returns the op group. Slots must have been built."""
    updates = []
    t = self.iterations.assign_add(1)
    scalars = {}  # The step's scalars once per (device, dtype), not once per variable: the trace grows less.
    for grad, var in zip(grads, variables):
      if grad is None:
        continue
      key = _SlotKey(var)
      if key not in self.slots:
        raise errors.ConfigError('Optimizer has no slots for %s: call Build(variables) first.' % var.name)
      with tf.device(var.device):  # Beside the variable and its slots, whatever the caller's device scope.
        where = (var.device, var.dtype)
        if where not in scalars:
          scalars[where] = self._Scalars(tf.cast(learning_rate, var.dtype), tf.cast(t, var.dtype), var.dtype)
        updates.append(self._Update(grad, var, self.slots[key], scalars[where]))
    return tf.group(updates)

  def _Scalars(self, lr, t, dtype):
    """What every variable's update of this step and dtype reads: {'lr': ..., 't': ...} and the optimizer's own."""
    del dtype  # Used by subclasses.
    return {'lr': lr, 't': t}

  def SlotsOf(self, var):
    """{slot name: slot variable} of `var`."""
    return self.slots[_SlotKey(var)]

  def _Update(self, grad, var, slots, scalars):
    raise NotImplementedError


class SGD(BaseOptimizer):
  """SGD with optional (Nesterov) momentum: m = momentum * m + g; w -= lr * m (or lr * (g + momentum * m))."""

  _SLOTS = ('momentum',)

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('momentum', 0.0, 'Momentum coefficient; 0 for plain SGD.', check=param_checks.Fraction())
    p.Define('nesterov', False, 'Use Nesterov momentum.')
    return p

  def _Update(self, grad, var, slots, scalars):
    p, lr = self.params, scalars['lr']
    if not p.momentum:
      return var.assign_sub(lr * grad)
    m = slots['momentum'].assign(p.momentum * slots['momentum'] + grad)
    step = grad + p.momentum * m if p.nesterov else m
    return var.assign_sub(lr * step)


class Adam(BaseOptimizer):
  """Adam with bias correction; weight_decay > 0 makes it AdamW (decoupled: w -= lr * wd * w)."""

  _SLOTS = ('m', 'v')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('beta1', 0.9, 'Decay of the first moment.', check=param_checks.Fraction())
    p.Define('beta2', 0.999, 'Decay of the second moment.', check=param_checks.Fraction())
    p.Define('epsilon', 1e-8, 'Added to the root of the second moment.', check=param_checks.Positive())
    p.Define('weight_decay', 0.0, 'Decoupled weight decay (AdamW); 0 for Adam.', check=param_checks.Float(0))
    return p

  def _Scalars(self, lr, t, dtype):
    p = self.params
    beta1_power, beta2_power = tf.pow(tf.cast(p.beta1, dtype), t), tf.pow(tf.cast(p.beta2, dtype), t)
    return {'lr': lr, 'beta1_power': beta1_power, 'beta2_power': beta2_power, 'beta1': tf.cast(p.beta1, dtype),
            'beta2': tf.cast(p.beta2, dtype), 'epsilon': p.epsilon * tf.sqrt(1.0 - beta2_power),
            'decay': lr * p.weight_decay if p.weight_decay else None}

  def _Update(self, grad, var, slots, scalars):
    # w -= lr * (m_hat / (sqrt(v_hat) + epsilon) + weight_decay * w), by TensorFlow's fused kernel, which updates m,
    # v and w in place (element-wise Python ops would hold several temporaries of each variable's size at once).
    # The kernel computes lr_t * m / (sqrt(v) + epsilon_t); with lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t) and
    # epsilon_t = epsilon * sqrt(1 - beta2^t) that is the formula above.
    s = scalars
    decay = [var.assign_sub(s['decay'] * var)] if s['decay'] is not None else []  # On the weights before the step.
    with tf.control_dependencies(decay):
      return tf.raw_ops.ResourceApplyAdam(
          var=var.handle, m=slots['m'].handle, v=slots['v'].handle, beta1_power=s['beta1_power'],
          beta2_power=s['beta2_power'], lr=s['lr'], beta1=s['beta1'], beta2=s['beta2'], epsilon=s['epsilon'],
          grad=tf.cast(grad, var.dtype), use_locking=False)


def AdamW(weight_decay=0.01):
  """Params of Adam with decoupled weight decay."""
  return Adam.Params().Set(weight_decay=weight_decay)


class RMSProp(BaseOptimizer):
  """RMSProp: ms = decay * ms + (1 - decay) * g^2; w -= lr * g / sqrt(ms + eps), with optional momentum."""

  _SLOTS = ('ms', 'mom')

  @classmethod
  def Params(cls):
    p = super().Params()
    p.Define('decay', 0.9, 'Decay of the mean square.', check=param_checks.Fraction())
    p.Define('momentum', 0.0, 'Momentum coefficient.', check=param_checks.Fraction())
    p.Define('epsilon', 1e-10, 'Added inside the square root.', check=param_checks.Positive())
    return p

  def _Update(self, grad, var, slots, scalars):
    p, lr = self.params, scalars['lr']
    ms = slots['ms'].assign(p.decay * slots['ms'] + (1.0 - p.decay) * tf.square(grad))
    step = grad * tf.math.rsqrt(ms + p.epsilon)
    if p.momentum:
      step = slots['mom'].assign(p.momentum * slots['mom'] + step)
    return var.assign_sub(lr * step)
