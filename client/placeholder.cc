namespace tg {}
