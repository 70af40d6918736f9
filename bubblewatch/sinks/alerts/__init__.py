"""Alert webhooks: alert model, receivers, a persistent queue and delivery workers."""

from bubblewatch.sinks.alerts.dispatcher import (
    RECEIVER_TYPES,
    AlertDispatcher,
    ReceiverConfig,
    build_receiver,
)
from bubblewatch.sinks.alerts.model import Alert, AlertStatus
from bubblewatch.sinks.alerts.queue import PersistentQueue, QueueError
from bubblewatch.sinks.alerts.receivers import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AlertmanagerReceiver,
    HttpRequest,
    Receiver,
    SlackReceiver,
    WebhookReceiver,
    sign,
)
from bubblewatch.sinks.alerts.state import AlertStateStore
from bubblewatch.sinks.alerts.tracker import AlertTracker, TrackedAlert
from bubblewatch.sinks.alerts.transport import DeliveryError, HttpTransport, Transport
from bubblewatch.sinks.alerts.worker import DeliveryWorker, ReceiverStats, RetryPolicy

__all__ = [
    "RECEIVER_TYPES",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Alert",
    "AlertDispatcher",
    "AlertStateStore",
    "AlertStatus",
    "AlertTracker",
    "AlertmanagerReceiver",
    "DeliveryError",
    "DeliveryWorker",
    "HttpRequest",
    "HttpTransport",
    "PersistentQueue",
    "QueueError",
    "Receiver",
    "ReceiverConfig",
    "ReceiverStats",
    "RetryPolicy",
    "SlackReceiver",
    "TrackedAlert",
    "Transport",
    "WebhookReceiver",
    "build_receiver",
    "sign",
]
